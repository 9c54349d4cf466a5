"""Your own documents: a generated folder of Markdown, HTML, PDF, CSV and text files (and a
few that cannot be read), indexed with BM25 on one core; prints one JSON object.

    taskset -c 1 python bench/own_docs.py --files 1000 [--walk 50000] [--grains]

Reports: every file read or skipped with its reason (against what was generated); the
page number and heading path of the top hit of a query made of a section's (or page's,
or row's) own marker words, for a sample of them; ``extracted_text[char_start:char_end]
== span`` for every hit at the passage grain (and, with ``--grains``, the phrase,
sentence, passage and document grains of a phrase index over a small part of the folder
and the answer grain read over the BM25 index, with the shipped models); the BM25
indexing rate in files/s for the files that are not PDF and in pages/s for the PDFs,
each a folder of its own indexed whole (reading, splitting, the passage store and BM25);
and, with ``--walk N``, the peak Python memory of reading a folder of N files against
the text it holds.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from anygrain import Index
from anygrain.corpus.formats import parse_source
from anygrain.errors import ErrorLog

WORDS = [
    "river",
    "mountain",
    "engine",
    "ledger",
    "harbour",
    "signal",
    "garden",
    "archive",
    "circuit",
    "lantern",
    "meadow",
    "quarry",
    "violin",
    "timber",
    "orbit",
    "canyon",
    "beacon",
    "glacier",
    "compass",
    "furnace",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


class Folder:
    """The generated files and, for each marker word, where its text is."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.n = 0
        self.where: dict[str, dict[str, Any]] = {}  # marker -> source, headings|page|line
        self.kinds: dict[str, int] = {}
        self.broken: dict[str, str] = {}  # relative path -> the category it is skipped under
        self.pdf_pages = 0

    def marker(self, **where: Any) -> str:
        self.n += 1
        m = f"zq{self.n:06d}x"
        self.where[m] = where
        return m

    def write(self, rel: str, text: str, kind: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def markdown(self, rel: str) -> None:
        title = f"Guide {self.n}"
        out = [f"---\ntitle: {title}\ntags: [bench]\n---\n", f"# {title}\n"]
        for s in range(3):
            head = f"Topic {s}"
            m = self.marker(source=rel, headings=[title, head])
            out.append(f"## {head}\n\n{prose(self.rng, 30)} {m}.\n\n{prose(self.rng, 25)}\n")
            if s == 1:
                sub = "Details"
                m2 = self.marker(source=rel, headings=[title, head, sub])
                out.append(
                    f"### {sub}\n\n```\ncode {prose(self.rng, 5)}\n```\n\n{prose(self.rng, 20)} {m2}.\n"
                )
        self.write(rel, "\n".join(out), "markdown")

    def html(self, rel: str) -> None:
        title = f"Page {self.n}"
        body = [f"<h1>{title}</h1>"]
        for s in range(3):
            head = f"Part {s}"
            m = self.marker(source=rel, headings=[title, head])
            body.append(
                f"<h2>{head}</h2><p>{prose(self.rng, 30)} <b>{m}</b>.</p><ul><li>{prose(self.rng, 8)}</li></ul>"
            )
        page = (
            f"<html><head><title>{title}</title></head><body><header>Site header zzheader</header>"
            f"<nav><a href='/'>Home zznav</a></nav><main>{''.join(body)}</main>"
            f"<footer>Footer zzfooter</footer><script>var zzscript = 1;</script></body></html>"
        )
        self.write(rel, page, "html")

    def csv(self, rel: str) -> None:
        rows = ["id,title,text,year"]
        for r in range(20):
            m = self.marker(source=rel, line=r + 2)
            rows.append(f'{rel}-{r},Row {r},"{prose(self.rng, 20)} {m}",{2000 + r}')
        self.write(rel, "\n".join(rows) + "\n", "csv")

    def text(self, rel: str) -> None:
        paras = []
        for _ in range(3):
            m = self.marker(source=rel)
            paras.append(f"{prose(self.rng, 40)} {m}.")
        self.write(rel, "\n\n".join(paras) + "\n", "text")

    def pdf(self, rel: str) -> None:
        from reportlab.pdfgen import canvas

        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        c = canvas.Canvas(str(p))
        pages = self.rng.randint(3, 6)
        for page in range(1, pages + 1):
            m = self.marker(source=rel, page=page)
            words = f"{prose(self.rng, 60)} {m}".split()
            y = 780
            for k in range(0, len(words), 10):
                c.drawString(72, y, " ".join(words[k : k + 10]))
                y -= 16
            c.showPage()
        c.save()
        self.pdf_pages += pages
        self.kinds["pdf"] = self.kinds.get("pdf", 0) + 1

    def broken_files(self) -> None:
        from reportlab.pdfgen import canvas

        d = self.root / "notes" / "junk"
        d.mkdir(parents=True, exist_ok=True)
        (d / "empty.md").write_bytes(b"")
        (d / "picture.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
        (d / "latin1.txt").write_bytes("Cr\xe8me br\xfbl\xe9e.\n".encode("latin-1"))
        (d / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0")
        (self.root / "pdfs" / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << >> cut short")
        c = canvas.Canvas(str(self.root / "pdfs" / "scan.pdf"))
        c.rect(100, 100, 300, 400, fill=1)
        c.showPage()
        c.save()
        self.broken = {
            "notes/junk/empty.md": "empty file",
            "notes/junk/picture.md": "binary file",
            "notes/junk/latin1.txt": "not UTF-8",
            "notes/junk/photo.jpg": "unsupported .jpg",
            "pdfs/broken.pdf": "damaged PDF",
            "pdfs/scan.pdf": "no text layer (scanned PDF)",
        }


def generate(root: Path, files: int, seed: int) -> Folder:
    f = Folder(root, seed)
    share = {"markdown": 0.35, "html": 0.25, "text": 0.22, "csv": 0.06, "pdf": 0.12}
    counts = {k: max(1, round(v * files)) for k, v in share.items()}
    for i in range(counts["markdown"]):
        f.markdown(f"notes/md/{i // 100:02d}/guide-{i:04d}.md")
    for i in range(counts["html"]):
        f.html(f"notes/web/page-{i:04d}.html")
    for i in range(counts["text"]):
        f.text(f"notes/txt/note-{i:04d}.txt")
    for i in range(counts["csv"]):
        f.csv(f"notes/tables/table-{i:03d}.csv")
    for i in range(counts["pdf"]):
        f.pdf(f"pdfs/report-{i:04d}.pdf")
    f.broken_files()
    return f


def timed_build(src: Path, out: Path) -> tuple[Index, ErrorLog, float]:
    errors = ErrorLog()
    t0 = time.perf_counter()
    idx = Index.build(str(src), kind="bm25", out=out, errors=errors, progress=False)
    return idx, errors, time.perf_counter() - t0


def stages(src: Path, idx: Index) -> dict[str, float]:
    """Seconds of the stages of a build of ``src``: the files read and cut into passages
    (the readers and the splitter), the passages' sentences split (the store keeps them),
    and the rest (languages, the passage store's Arrow files, BM25)."""
    from anygrain.corpus.sentences import split_sentences
    from anygrain.corpus.splitters import SplitSpec, split_document

    t0 = time.perf_counter()
    n = 0
    for doc in parse_source(src).documents(ErrorLog()):
        n += sum(1 for _ in split_document(doc, SplitSpec()))
    read_s = time.perf_counter() - t0
    texts = idx.corpus.texts()
    t0 = time.perf_counter()
    for text in texts:
        split_sentences(text)
    return {"read_and_cut_s": read_s, "sentences_s": time.perf_counter() - t0, "passages": n}


def span_ok(idx: Index, hits: list[Any]) -> tuple[int, int]:
    ok = 0
    for h in hits:
        text = idx.corpus.document_text(h.doc_id)
        ok += h.char_start is not None and text[h.char_start : h.char_end] == h.answer_text
    return ok, len(hits)


def check_files(folder: Folder, errors: ErrorLog) -> dict[str, Any]:
    noted = {Path(n.path).relative_to(folder.root).as_posix(): n for n in errors.files}
    generated = {
        p.relative_to(folder.root).as_posix() for p in folder.root.rglob("*") if p.is_file()
    }
    broken_ok = all(
        rel in noted and not noted[rel].read and noted[rel].category == cat
        for rel, cat in folder.broken.items()
    )
    return {
        "generated": len(generated),
        "read": sum(n.read for n in errors.files),
        "skipped": len(errors.files_skipped),
        "read_or_skipped_with_reason": sum(
            rel in noted and (noted[rel].read or bool(noted[rel].reason)) for rel in generated
        ),
        "all_accounted": generated == set(noted),
        "broken_skipped_for_the_right_reason": broken_ok,
        "summary": errors.files_summary(),
    }


def check_provenance(folder: Folder, idx: Index, sample: int, seed: int) -> dict[str, Any]:
    markers = sorted(folder.where)
    random.Random(seed).shuffle(markers)
    picked = markers[:sample]
    hits = idx.search(picked, k=10)
    right = {"source": 0, "page": 0, "headings": 0, "line": 0}
    asked = {"page": 0, "headings": 0, "line": 0}
    all_hits = [h for hs in hits for h in hs]
    for m, hs in zip(picked, hits, strict=True):
        want, top = folder.where[m], hs[0] if hs else None
        if top is None:
            continue
        right["source"] += top.meta.get("source") == want["source"] and m in top.text
        for key in asked:
            if key in want:
                asked[key] += 1
                right[key] += top.meta.get(key) == want[key]
    ok, n = span_ok(idx, all_hits)
    return {
        "sampled": len(picked),
        "top_hit_right_file": right["source"],
        **{f"{k}_checked": asked[k] for k in asked},
        **{f"{k}_right": right[k] for k in asked},
        "passage_hits_checked": n,
        "passage_hits_span_identity": ok,
        "furniture_indexed": sum(
            bool(idx.search([w], k=1)[0]) for w in ("zzheader", "zznav", "zzfooter", "zzscript")
        ),
    }


def check_grains(folder: Folder, bm25: Index, work: Path) -> dict[str, Any]:
    """The phrase index's four grains over a small part of the folder, and the answer grain
    over the BM25 index, with the shipped models."""
    from anygrain.api import search_index
    from anygrain.hits.hit import Unit

    small = work / "small"
    sources = sorted({w["source"] for w in folder.where.values()})
    for rel in sources[:: max(1, len(sources) // 30)][:30]:
        dst = small / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder.root / rel, dst)
    t0 = time.perf_counter()
    phrase = Index.build(str(small), kind="phrase", out=work / "phrase", progress=False)
    build_s = time.perf_counter() - t0
    qs = [f"{w} {m}" for m, w in zip(sorted(folder.where)[:20], WORDS, strict=False)]
    out: dict[str, Any] = {
        "phrase_files": sum(1 for p in small.rglob("*") if p.is_file()),
        "phrase_build_s": round(build_s, 1),
    }
    for unit in (Unit.PHRASE, Unit.SENTENCE, Unit.PASSAGE, Unit.DOCUMENT):
        hits = [h for hs in phrase.search(qs, k=5, unit=unit) for h in hs]
        ok, n = span_ok(phrase, hits)
        out[unit.value] = {"hits": n, "span_identity": ok}
    questions = [f"What is near {m}?" for m in sorted(folder.where)[:20]]
    answers = [h for hs in search_index(bm25, questions, 3, unit="answer", read=3) for h in hs]
    ok, n = span_ok(bm25, answers)
    out["answer"] = {"hits": n, "span_identity": ok}
    return out


def walk_memory(work: Path, n: int) -> dict[str, Any]:
    root = work / "walk"
    body = "A line of text in a small note. " * 40
    for i in range(n):
        p = root / f"d{i // 1000:03d}" / f"n{i:06d}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
    errors = ErrorLog()
    t0 = time.perf_counter()
    tracemalloc.start()
    docs = total = 0
    for doc in parse_source(root).documents(errors):
        if not docs:
            tracemalloc.reset_peak()  # the readers are imported by then
        docs += 1
        total += len(doc.text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "files": n,
        "documents": docs,
        "text_mb": round(total / 1e6, 1),
        "peak_python_mb": round(peak / 1e6, 1),
        "files_per_s_reading": round(docs / (time.perf_counter() - t0), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=1000, help="files to generate (readable ones)")
    ap.add_argument("--sample", type=int, default=400, help="markers whose top hit is checked")
    ap.add_argument("--walk", type=int, default=0, help="also read a folder of this many files")
    ap.add_argument("--grains", action="store_true", help="also phrase grains and answers")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="own-docs-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log(f"generating {a.files} files in {work}")
    t0 = time.perf_counter()
    folder = generate(work / "mydocs", a.files, a.seed)
    gen_s = time.perf_counter() - t0
    # a first build imports the readers, the analyzers and BM25: not counted
    warm = work / "warm"
    shutil.copytree(work / "mydocs" / "notes" / "txt", warm / "txt")
    shutil.copy(next((work / "mydocs" / "pdfs").glob("report-*.pdf")), warm)
    shutil.copy(next((work / "mydocs" / "notes" / "web").glob("*.html")), warm)
    timed_build(warm, work / "idx-warm")
    log("indexing the files that are not PDF")
    idx_notes, err_notes, notes_s = timed_build(work / "mydocs" / "notes", work / "idx-notes")
    notes_read = sum(n.read for n in err_notes.files)
    notes_stages = stages(work / "mydocs" / "notes", idx_notes)
    log("indexing the PDFs")
    idx_pdfs, err_pdfs, pdf_s = timed_build(work / "mydocs" / "pdfs", work / "idx-pdfs")
    pdf_stages = stages(work / "mydocs" / "pdfs", idx_pdfs)
    log("indexing the whole folder")
    idx, errors, all_s = timed_build(work / "mydocs", work / "idx")
    report: dict[str, Any] = {
        "generated": {
            **folder.kinds,
            "pdf_pages": folder.pdf_pages,
            "broken": len(folder.broken),
            "seconds": round(gen_s, 1),
        },
        "index": {"passages": len(idx.corpus), "documents": idx.corpus.n_documents},
        "files": check_files(folder, errors),
        "throughput": {
            "files_not_pdf": notes_read,
            "files_per_s_not_pdf": round(notes_read / notes_s, 1),
            "pdf_files": sum(n.read for n in err_pdfs.files),
            "pdf_pages": folder.pdf_pages,
            "pdf_pages_per_s": round(folder.pdf_pages / pdf_s, 1),
            "not_pdf_s": round(notes_s, 2),
            "not_pdf_stages_s": {k: round(v, 2) for k, v in notes_stages.items()},
            "not_pdf_files_per_s_reading_and_cutting": round(
                notes_read / notes_stages["read_and_cut_s"], 1
            ),
            "pdf_s": round(pdf_s, 2),
            "pdf_stages_s": {k: round(v, 2) for k, v in pdf_stages.items()},
            "pdf_pages_per_s_reading_and_cutting": round(
                folder.pdf_pages / pdf_stages["read_and_cut_s"], 1
            ),
            "whole_folder_s": round(all_s, 2),
            "whole_folder_files_per_s": round(sum(n.read for n in errors.files) / all_s, 1),
        },
        "provenance": check_provenance(folder, idx, a.sample, a.seed),
    }
    if a.grains:
        log("phrase grains and answers")
        report["grains"] = check_grains(folder, idx, work)
    if a.walk:
        log(f"reading a folder of {a.walk} files")
        report["walk"] = walk_memory(work, a.walk)
    print(json.dumps(report, indent=2))
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
