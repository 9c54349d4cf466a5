"""The ``anygrain`` command: thin wrappers over the Python API.

Each command parses its options, calls one API function and prints the
result; errors anygrain raises on purpose are printed without a traceback.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from anygrain.cli_common import console, fail, out
from anygrain.corpus.splitters import split_help
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.index.base import IndexKind
from anygrain.index.fusion import FusionMethod
from anygrain.index.scope import Scope
from anygrain.phrase.compress import Compress
from anygrain.search.hit import Unit
from anygrain.utils.checksums import Verify

VerifyOpt = Annotated[
    Verify,
    typer.Option(help="Check the index files on open: sizes | small (files <= 64 MB) | full"),
]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Dense retrieval at any grain: phrases, sentences, passages, documents.",
)


def _version(value: bool) -> None:
    if value:
        from anygrain import __version__

        out.print(f"anygrain {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Dense retrieval at any grain: phrases, sentences, passages, documents."""


def model_option(index_dir: Path, model: str | None) -> dict[str, Any]:
    """``Index.load`` options for ``--model``: a question-side model replacing the index's own
    (the index checks that it makes the same passage or phrase vectors)."""
    if model is None:
        return {}
    from anygrain.index.base import index_class, read_manifest

    kind = read_manifest(index_dir).get("kind")
    if kind not in {k.value for k in IndexKind} or not index_class(kind).takes_query_model:
        raise AnygrainError(f"{index_dir}: --model needs a dense or phrase index, not {kind}")
    return {"model": model}


SPLIT_HELP = split_help()

ThreadsOpt = Annotated[
    Optional[int],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(
        "--threads",
        help="CPU threads for torch and FAISS (default: theirs, which follow "
        "OMP_NUM_THREADS); 1 on a CPU shared with other jobs",
    ),
]


def _index_summary(idx: Any, out_dir: Path, errors: ErrorLog) -> dict[str, Any]:
    """What ``index`` reports: counts, kind, where, the model used, the files read."""
    c = idx.corpus
    d: dict[str, Any] = {
        "kind": idx.kind.value,
        "out": str(out_dir),
        "n_passages": len(c),
        "n_documents": c.n_documents,
        "source_format": c.manifest["source_format"],
    }
    dense = getattr(idx, "dense", idx)
    if getattr(dense, "kind", None) is IndexKind.DENSE:
        d["model"] = dense.settings["model"].get("name") or dense.settings["model"]["base_model"]
    shards = getattr(idx, "shards", None)
    if shards is not None:
        d["shards"] = len(shards)
    if idx.kind is IndexKind.HYBRID:
        d["fusion"] = idx.manifest["settings"]["fusion"]
        d["components"] = idx.manifest.get("components", {})
    if errors.files:
        d["files"] = {
            "read": [f.path for f in errors.files if f.read],
            "skipped": [{"path": f.path, "reason": f.reason} for f in errors.files_skipped],
        }
    d["n_skipped_records"] = errors.n_skipped
    return d


def _report_files(errors: ErrorLog, *, quiet: bool) -> None:
    """Each file a directory source was read from or skipped, on stderr (skipped always)."""
    for f in sorted(errors.files, key=lambda f: f.path):
        if f.read and quiet:
            continue
        line = escape(str(f))
        console.print(line if f.read else f"[yellow]{line}[/]", highlight=False, soft_wrap=True)


def _ray_executor(kind: IndexKind, address: str, workers: int | None, retries: int | None) -> Any:
    """The Ray executor ``index --ray`` asked for (importable without Ray, which it needs)."""
    from anygrain.encode.ray_executor import RayConfig, RayExecutor

    if kind not in (IndexKind.DENSE, IndexKind.HYBRID, IndexKind.PHRASE):
        raise AnygrainError(f"--ray encodes dense, hybrid and phrase indexes, not {kind.value}")
    defaults = RayConfig()
    return RayExecutor(
        RayConfig(
            address=address,
            workers=defaults.workers if workers is None else workers,
            retries=defaults.retries if retries is None else retries,
        )
    )


@app.command("index")
def index_cmd(
    out_dir: Annotated[Path, typer.Option("--out", help="Index directory to write")],
    source: Annotated[
        str | None,
        typer.Argument(
            help="Corpus: PATH, FORMAT:PATH, or an existing corpus directory (none with --from)"
        ),
    ] = None,
    kind: Annotated[IndexKind, typer.Option(help="Index kind")] = IndexKind.BM25,
    split: Annotated[str, typer.Option(help=SPLIT_HELP)] = "auto",
    lang: Annotated[str | None, typer.Option(help="en | zh (detected when omitted)")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Encoder: alias (minilm, me5-small), hub name or directory "
            "(default: minilm, or me5-small for a Chinese corpus)"
        ),
    ] = None,
    faiss: Annotated[
        str | None,
        typer.Option("--faiss", help="FAISS factory string (default: chosen from corpus size)"),
    ] = None,
    threshold: Annotated[
        float | None, typer.Option(help="Phrase filter threshold tau (phrase indexes)")
    ] = None,
    from_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--from",
            help="Hybrid from existing indexes: --from BM25_DIR --from DENSE_DIR (same corpus); "
            "nothing is re-encoded",
        ),
    ] = None,
    fusion: Annotated[
        FusionMethod | None, typer.Option(help="Hybrid fusion method (default zscore)")
    ] = None,
    fusion_weight: Annotated[
        float | None,
        typer.Option(
            "--fusion-weight", help="Hybrid: weight of the dense side (default: the method's)"
        ),
    ] = None,
    fusion_depth: Annotated[
        int | None,
        typer.Option(
            "--fusion-depth", help="Hybrid: candidates taken from each system (default 100)"
        ),
    ] = None,
    threads: ThreadsOpt = None,
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            min=1,
            help="Build N indexes of --kind over row ranges of the corpus, searched as one "
            "and merged exactly (bm25, dense, phrase)",
        ),
    ] = 1,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as one JSON object on stdout")
    ] = False,
    compress: Annotated[
        Compress,
        typer.Option(help="Phrase indexes: quantize the FAISS vectors (spans scored decoded)"),
    ] = Compress.NONE,
    pq_m: Annotated[
        int | None, typer.Option("--pq-m", help="opq-pq: bytes per vector (default dim/8)")
    ] = None,
    keep_dump: Annotated[
        bool | None,
        typer.Option(
            "--keep-dump/--no-keep-dump",
            help="Phrase indexes: keep the float16 vectors (default: only with --compress none)",
        ),
    ] = None,
    on_error: Annotated[
        ErrorPolicy,
        typer.Option("--on-error", help="stop at a malformed record, or skip and count it"),
    ] = ErrorPolicy.STOP,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the anygrain index already in --out")
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Encode on Ray (dense, hybrid, phrase): local (start one for this build), "
            "auto (join the cluster on this machine) or HOST:PORT; see docs/scale.md",
        ),
    ] = None,
    ray_workers: Annotated[
        int | None,
        typer.Option("--workers", help="With --ray: encoding actors, one model each (default 2)"),
    ] = None,
    ray_retries: Annotated[
        int | None,
        typer.Option("--retries", help="With --ray: tries again per failed shard (default 2)"),
    ] = None,
) -> None:
    """Build an index from a corpus (or a hybrid index from a BM25 and a dense index)."""
    from anygrain.api import build_index, combine_hybrid

    errors = ErrorLog(on_error)
    fuse: dict[str, Any] = {}
    if fusion is not None:
        fuse["fusion"] = fusion
    if fusion_weight is not None:
        fuse["weight"] = fusion_weight
    if fusion_depth is not None:
        fuse["depth"] = fusion_depth
    try:
        if fuse and kind is not IndexKind.HYBRID:
            raise AnygrainError("--fusion, --fusion-weight and --fusion-depth need --kind hybrid")
        if from_dirs:
            if kind is not IndexKind.HYBRID:
                raise AnygrainError("--from needs --kind hybrid")
            if len(from_dirs) != 2 or source is not None:
                raise AnygrainError(
                    "--kind hybrid --from takes exactly two index directories "
                    "(--from BM25_DIR --from DENSE_DIR) and no SOURCE"
                )
            if model or faiss or lang or split != "auto":
                raise AnygrainError(
                    "--model, --faiss, --lang and --split apply when encoding; "
                    "--from reuses the indexes as they were built"
                )
            from anygrain.utils.threads import set_threads

            set_threads(threads)
            idx = combine_hybrid(from_dirs[0], from_dirs[1], out_dir, overwrite=overwrite, **fuse)
        else:
            if source is None:
                raise AnygrainError("give a SOURCE to index (or --kind hybrid --from two indexes)")
            settings: dict[str, Any] = {
                "split": split,
                "lang": lang,
                "errors": errors,
                "progress": not quiet,
                **fuse,
            }
            if model:
                settings["model"] = model
            if faiss:
                settings["factory"] = faiss
            if threshold is not None:
                settings["threshold"] = threshold
            if ray_address is not None:
                settings["executor"] = _ray_executor(kind, ray_address, ray_workers, ray_retries)
            elif ray_workers is not None or ray_retries is not None:
                raise AnygrainError("--workers and --retries apply with --ray")
            if compress is not Compress.NONE or pq_m is not None or keep_dump is not None:
                # a kind without them refuses them (Index.build checks its settings)
                settings.update(compress=compress, pq_m=pq_m, keep_dump=keep_dump)
            if kind is IndexKind.SHARDED:
                raise AnygrainError(
                    "give the kind of the shards and their number: --kind dense --shards 4"
                )
            idx = build_index(
                source,
                kind=kind,
                out=out_dir,
                threads=threads,
                overwrite=overwrite,
                shards=shards,
                **settings,
            )
    except (AnygrainError, ValueError) as e:
        _report_files(errors, quiet=True)
        fail(e)
        return
    except OSError as e:  # e.g. permission denied: the path and reason, not a traceback
        fail(AnygrainError(f"{e.filename or out_dir}: {e.strerror or e}"))
        return
    _report_files(errors, quiet=quiet)
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]", soft_wrap=True)
    d = _index_summary(idx, out_dir, errors)
    if "model" not in d and model:
        d["model"] = model  # a phrase index: the phrase model it was encoded with
    if as_json:
        print(json.dumps(d, ensure_ascii=False))
        return
    if from_dirs:
        what = f"combined {from_dirs[0]} and {from_dirs[1]} ({d['n_passages']} passages)"
    else:
        what = (
            f"indexed {d['n_passages']} passages from {d['n_documents']} documents "
            f"({d['source_format']})"
        )
    with_model = f" with model {d['model']}" if "model" in d else ""
    out.print(f"{what} as {d['kind']}{with_model} → {out_dir}", highlight=False, soft_wrap=True)


def _read_question(query: str | None, question_file: str | None) -> str:
    """The question from the argument, a file, or stdin (``-``): a long question cannot be
    an argument (the OS limits their length)."""
    if query is not None and question_file is not None:
        raise AnygrainError("give the question as an argument or with --question-file, not both")
    if query is None and question_file is None:
        raise AnygrainError(
            "give the question as an argument, or --question-file PATH (- for stdin)"
        )
    if query is not None:
        return query
    assert question_file is not None
    if question_file == "-":
        text = sys.stdin.read()
    else:
        p = Path(question_file)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise AnygrainError(f"{p}: no such file") from None
        except UnicodeDecodeError as e:
            raise AnygrainError(f"{p}: not UTF-8 text (byte {e.start})") from None
    text = text.strip()
    if not text:
        raise AnygrainError(
            f"{'stdin' if question_file == '-' else question_file}: the question is empty"
        )
    return text


def _fusion_options(
    index_dir: Path, fusion: FusionMethod | None, weight: float | None, depth: int | None
) -> dict[str, Any]:
    """Search-time fusion overrides, for hybrid indexes only."""
    opts: dict[str, Any] = {}
    if fusion is not None:
        opts["fusion"] = fusion.value
    if weight is not None:
        opts["weight"] = weight
    if depth is not None:
        if depth < 1:
            raise AnygrainError(f"--fusion-depth must be at least 1, got {depth}")
        opts["depth"] = depth
    if opts:
        from anygrain.index.base import read_manifest

        kind = read_manifest(index_dir).get("kind")
        if kind != IndexKind.HYBRID.value:
            raise AnygrainError(
                f"{index_dir}: --fusion, --fusion-weight and --fusion-depth need a hybrid "
                f"index, not {kind}"
            )
    return opts


FusionOpt = Annotated[
    Optional[FusionMethod],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option("--fusion", help="Hybrid indexes: fusion method (default: the index's)"),
]
FusionWeightOpt = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option("--fusion-weight", help="Hybrid indexes: weight of the dense side"),
]
FusionDepthOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--fusion-depth", help="Hybrid indexes: candidates from each system"),
]


@app.command("search")
def search_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    query: Annotated[
        str | None, typer.Argument(help="The question (or use --question-file)")
    ] = None,
    question_file: Annotated[
        str | None,
        typer.Option("--question-file", help="Read the question from this file, or stdin with -"),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="How many hits")] = 10,
    unit: Annotated[
        Unit | None,
        typer.Option(help="Grain (phrase indexes): phrase | sentence | passage | document"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per hit on stdout")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(help="Question-side model to search with (query-side fine-tuned)"),
    ] = None,
    fusion: FusionOpt = None,
    fusion_weight: FusionWeightOpt = None,
    fusion_depth: FusionDepthOpt = None,
    threads: ThreadsOpt = None,
    verify: VerifyOpt = Verify.SMALL,
    stats: Annotated[
        bool,
        typer.Option("--stats", help="Phrase indexes: print the unit search's rounds (stderr)"),
    ] = False,
) -> None:
    """Search an index with one question (phrase indexes: answer phrases in their context)."""
    from anygrain.api import search_index
    from anygrain.cli_phrase import print_phrase_hits
    from anygrain.index.base import Index

    collected: list[Any] = []
    try:
        question = _read_question(query, question_file)
        opts = _fusion_options(index_dir, fusion, fusion_weight, fusion_depth)
        idx = Index.load(index_dir, verify=verify, **model_option(index_dir, model))
        if stats and idx.cuts_units():
            opts["stats"] = collected
        hits = search_index(idx, [question], k, unit=unit, threads=threads, **opts)[0]
    except AnygrainError as e:
        fail(e)
        return
    for st in collected:
        console.print(
            f"unit search: {st.rounds} round(s), depth {st.depth}, {st.units} units, "
            f"exhausted {st.exhausted}, exact {st.exact}"
        )
    if Unit.PHRASE in idx.units:
        print_phrase_hits(hits, as_json=as_json)
        return
    if as_json:
        for h in hits:
            print(json.dumps(h.to_dict(), ensure_ascii=False))
        return
    table = Table(show_lines=True)
    for col in ("#", "score", "title", "text"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        text = h.text if len(h.text) < 400 else h.text[:400] + "…"
        table.add_row(str(i), f"{h.score:.3f}", h.title, text)
    out.print(table)


@app.command("eval")
def eval_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    questions: Annotated[
        str, typer.Option("--questions", help="Question set: FORMAT:PATH or PATH")
    ],
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated metrics (default: top@1,top@5,top@20,mrr@20,p@20; "
            "phrase indexes: em,f1,top@1,top@k)"
        ),
    ] = None,
    k: Annotated[
        int | None,
        typer.Option("-k", help="Hits retrieved per question (default: largest cutoff)"),
    ] = None,
    run_out: Annotated[Path | None, typer.Option("--run-out", help="Write a TREC run file")] = None,
    drop_empty: Annotated[
        bool,
        typer.Option(
            "--drop-empty",
            help="Drop queries with no results from means (original Multi-CPR script)",
        ),
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N questions")] = None,
    on_error: Annotated[ErrorPolicy, typer.Option("--on-error")] = ErrorPolicy.STOP,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    unit: Annotated[
        Unit | None, typer.Option(help="Grain, for phrase indexes (default phrase)")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Question-side model to search with (query-side fine-tuned)"),
    ] = None,
    scope: Annotated[
        Scope,
        typer.Option(
            help="corpus, or gold-passage: phrase indexes search each question in its own "
            "passage (D={p}); passage indexes judge a hit by the question's gold passage id "
            "instead of answer containment"
        ),
    ] = Scope.CORPUS,
    fusion: FusionOpt = None,
    fusion_weight: FusionWeightOpt = None,
    fusion_depth: FusionDepthOpt = None,
    threads: ThreadsOpt = None,
    verify: VerifyOpt = Verify.SMALL,
) -> None:
    """Evaluate an index on a question set."""
    from anygrain.api import evaluate_index
    from anygrain.index.base import Index

    errors = ErrorLog(on_error)
    try:
        opts = _fusion_options(index_dir, fusion, fusion_weight, fusion_depth)
        idx = Index.load(index_dir, verify=verify, **model_option(index_dir, model))
        report = evaluate_index(
            idx,
            questions,
            metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
            k=k,
            run_out=run_out,
            drop_empty=drop_empty,
            limit=limit,
            errors=errors,
            # the bar is on stderr, so it stays with --json (a long eval is not silent)
            progress=not quiet,
            unit=unit,
            scope=scope,
            search_options=opts or None,
            threads=threads,
        )
    except AnygrainError as e:
        fail(e)
        return
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]", soft_wrap=True)
    d = report.to_dict()
    d["scope"] = scope.value
    if idx.cuts_units():
        d["unit"] = idx.check_unit(unit).value
    if as_json:
        print(json.dumps(d, ensure_ascii=False))
        return
    table = Table(title=f"{index_dir} on {questions} ({d['n_questions']} questions)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, v in d["metrics"].items():
        table.add_row(name, f"{v:.4f}")
    out.print(table)
    if "unit_search" in d:
        console.print(f"unit search: {json.dumps(d['unit_search'])}", soft_wrap=True)


@app.command("verify")
def verify_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
) -> None:
    """Check every file of an index against the checksums recorded when it was built.

    Lists each damaged, missing or unexpected file; exits 1 when there is any."""
    from anygrain.index.base import check_index_files, read_manifest

    try:
        m = read_manifest(index_dir)
        problems = check_index_files(index_dir, m, extra=True)
    except AnygrainError as e:
        fail(e)
    for p in problems:
        out.print(escape(str(p)), highlight=False, soft_wrap=True)
    n = len(m["files"]) + len(m.get("corpus_files") or {})
    if problems:
        console.print(
            f"[bold red]{len(problems)} problem(s)[/] in {escape(str(index_dir))}; rebuild the index",
            highlight=False,
        )
        raise typer.Exit(1)
    out.print(f"ok: {n} files match their checksums", highlight=False)


# --- adding and deleting documents (anygrain.index.updater) ---------------------------------
@app.command("add")
def add_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory to add to")],
    source: Annotated[str, typer.Argument(help="Documents to add: FORMAT:PATH or PATH")],
    split: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help=f"Passage split (default: the corpus's own): {SPLIT_HELP}"),
    ] = None,
    on_error: Annotated[
        ErrorPolicy,
        typer.Option("--on-error", help="stop at a malformed record, or skip and count it"),
    ] = ErrorPolicy.STOP,
    threads: ThreadsOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    """Add documents to an index: only new passages are encoded; old rows and ids stay.

    BM25 statistics are corpus-wide, so a BM25 part is rebuilt from the grown corpus."""
    from anygrain.api import add_documents

    errors = ErrorLog(on_error)
    try:
        idx = add_documents(
            index_dir, source, split=split, errors=errors, progress=not quiet, threads=threads
        )
    except AnygrainError as e:
        fail(e)
    out.print(
        json.dumps(
            {
                "kind": idx.kind.value,
                "index": str(index_dir),
                "n_passages": len(idx.corpus),
                "n_documents": idx.corpus.n_documents,
                "n_skipped_records": errors.n_skipped,
            }
        ),
        highlight=False,
        soft_wrap=True,
    )


@app.command("delete")
def delete_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    doc: Annotated[list[str], typer.Option("--doc", help="Document id to delete (repeatable)")],
) -> None:
    """Mark documents deleted: searches skip them at once; `anygrain compact` drops them."""
    from anygrain.api import delete_documents

    try:
        res = delete_documents(index_dir, doc)
    except AnygrainError as e:
        fail(e)
    out.print(json.dumps(res, ensure_ascii=False), highlight=False, soft_wrap=True)


@app.command("compact")
def compact_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    threads: ThreadsOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    """Rebuild an index without its deleted documents, reusing its stored vectors."""
    from anygrain.api import compact_index

    try:
        idx = compact_index(index_dir, progress=not quiet, threads=threads)
    except AnygrainError as e:
        fail(e)
    out.print(
        json.dumps({"index": str(index_dir), "n_passages": len(idx.corpus)}),
        highlight=False,
        soft_wrap=True,
    )


@app.command("formats")
def formats_cmd() -> None:
    """List the source formats anygrain reads."""
    from anygrain.corpus.formats import FORMATS, _ensure_loaded

    _ensure_loaded()
    for f in sorted(FORMATS.values(), key=lambda f: f.name):
        what = "+".join(
            x for x, fn in (("documents", f.read_documents), ("questions", f.read_questions)) if fn
        )
        out.print(f"[bold]{f.name:12}[/] {what:20} {f.description}", highlight=False)


@app.command("demo")
def demo_cmd(
    out_dir: Annotated[Path, typer.Option("--out", help="Where to write the demo index")] = Path(
        "anygrain-demo"
    ),
    kind: Annotated[
        str, typer.Option(help="Index kind: phrase (shipped phrase model), bm25, dense, hybrid")
    ] = "phrase",
    max_documents: Annotated[
        int | None,
        typer.Option("--max-documents", help="Index only the first N reference topics (quicker)"),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    """Index CPython's bundled reference topics (offline) and answer ten questions: the answer
    phrase, its sentence and its passage (phrase index), or passages (other kinds)."""
    from anygrain.api import run_demo
    from anygrain.search.highlight import phrase_context

    try:
        result = run_demo(out_dir, kind=kind, progress=not quiet, max_documents=max_documents)
    except AnygrainError as e:
        fail(e)
        return
    if result.reused:
        console.print(f"reusing the demo index at {out_dir} (same corpus and model)")
    for a in result.answers:
        out.print(f"[bold]Q:[/] {escape(a.question.text)}", highlight=False)
        for unit, hits in a.hits.items():
            if not hits:
                out.print(f"   {unit.value:8} (no hit)", highlight=False)
                continue
            h = hits[0]
            if unit is Unit.PHRASE:
                # the phrase marked inside its context: what the demo is about
                before, phrase, after = (x.replace("\n", " ") for x in phrase_context(h, width=40))
                line = (
                    f"[bold yellow]{escape(phrase)}[/]  [green]{escape(h.title)}[/]  "
                    f"{escape(before)}[bold yellow]{escape(phrase)}[/]{escape(after)}"
                )
            else:
                text = " ".join(h.text.split())
                text = text[:100] + ("…" if len(text) > 100 else "")
                line = f"[green]{escape(h.title)}[/]  {escape(text)}"
            out.print(
                f"   {unit.value:8} {line}",
                highlight=False,
                soft_wrap=True,
            )
    print(json.dumps(result.to_dict()))


def _register_groups() -> None:
    # Command groups live beside their API; each module is thin like this one.
    from anygrain.cli_eval_domains import eval_domains_cmd
    from anygrain.cli_phrase import pack_cmd, refilter_cmd, train_phrase_cmd, train_query_side_cmd
    from anygrain.cli_reader import ask_cmd, eval_reader_cmd, train_reader_cmd
    from anygrain.cli_serve import serve_cmd
    from anygrain.cli_train import train_app

    train_app.command("phrase")(train_phrase_cmd)
    train_app.command("reader")(train_reader_cmd)
    train_app.command("phrase-query-side")(train_query_side_cmd)
    app.command("refilter")(refilter_cmd)
    app.command("pack")(pack_cmd)
    app.command("ask")(ask_cmd)
    app.command("eval-reader")(eval_reader_cmd)
    app.command("eval-domains")(eval_domains_cmd)
    app.command("serve")(serve_cmd)
    app.add_typer(train_app, name="train")


_register_groups()


def stop_on_sigterm() -> None:
    """Make SIGTERM stop a command the way Ctrl-C does (trainers checkpoint, encoders keep
    their finished shards).  ``kill``, job schedulers and timeouts send SIGTERM, and a job
    started in the background by a script ignores SIGINT, so Ctrl-C alone is not enough."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main() -> None:
    stop_on_sigterm()
    # The library warns through logging (e.g. qrels ids missing from the corpus); show those
    # warnings on stderr as one line each, apart from stdout's results.  Only anygrain's:
    # other libraries keep Python's default handling (bm25s logs at DEBUG, for one).
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logging.getLogger("anygrain").addHandler(handler)
    app()


if __name__ == "__main__":
    main()
