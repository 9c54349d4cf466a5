"""How much an MCP ``search`` response costs a model's context: its size in characters
over the unique passage text it returns, for the compact form (the default: each passage's
text once, its hits under it) and the full form (each hit whole), at the phrase and answer
grains, over SQuAD dev questions, through the MCP SDK's in-memory client.

    taskset -c 1 python bench/mcp_size.py [INDEX] [--squad dev-v1.1.json] [--questions 20]

INDEX: a phrase index of SQuAD dev; without one, it is built (``anygrain index
squad:PATH --kind phrase``, a few minutes on one core) under ``--work`` (default: a folder
in the system's temporary directory), or reused from there.  The answer grain reads with
the shipped reader, as ``anygrain search INDEX "q" --unit answer`` does.

A response's size is its text content (what a model reads; the structured content is the
same JSON); ``full_indented`` is the full form as the SDK indents it (mcp 1.x, and mcp 2.x
before the server wrote its own text).  The unique text it returns is the characters of
its distinct passage texts and distinct answer texts (``ratio_*``), or of its distinct
passage texts alone (``passage_ratio_*``).  Prints one JSON object: per grain and form, the
mean, median and largest ratio over the questions and the ratio of the totals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SQUAD = ROOT.parent / "shared" / "data" / "squad-v1.1" / "dev-v1.1.json"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def questions(path: Path, n: int) -> list[str]:
    """``n`` questions spread evenly over the dev set (not all from its first article)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    qs = [
        qa["question"]
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    step = max(1, len(qs) // n)
    return qs[::step][:n]


def phrase_index(given: str | None, squad: Path, work: Path) -> Path:
    if given:
        return Path(given)
    out = work / "squad-dev-phrase"
    if not (out / "index.json").exists():
        log(f"building the phrase index of {squad} at {out} (a few minutes)")
        cmd = ["anygrain", "index", f"squad:{squad}", "--kind", "phrase", "--out", str(out), "-q"]
        subprocess.run(cmd, check=True)
    return out


def unique_chars(body: dict[str, Any]) -> tuple[int, int]:
    """Characters of the distinct passage and answer texts, and of the passage texts."""
    passages = {p["text"] for p in body.get("passages") or []}
    passages |= {h["text"] for h in body.get("hits") or []}
    fields = body.get("hit_fields") or []  # the compact form's hits are rows of these
    at = fields.index("answer") if "answer" in fields else None
    rows = [row for p in body.get("passages") or [] for row in p["hits"]]
    answers = {row[at] or "" for row in rows} if at is not None else {""}
    answers |= {h["answer"] for h in body.get("hits") or []}
    text = sum(len(t) for t in passages)
    return text + sum(len(a) for a in answers), text


Size = tuple[int, tuple[int, int]]  # (chars, (unique chars, passage chars))


def summary(sizes: list[Size]) -> dict[str, Any]:
    out: dict[str, Any] = {"questions": len(sizes)}
    out["mean_chars"] = round(statistics.mean(c for c, _ in sizes))
    for name, i in (("", 0), ("passage_", 1)):
        ratios = [c / u[i] for c, u in sizes]
        out[f"mean_{name or 'unique_'}chars"] = round(statistics.mean(u[i] for _, u in sizes))
        out[f"{name}ratio_mean"] = round(statistics.mean(ratios), 3)
        out[f"{name}ratio_median"] = round(statistics.median(ratios), 3)
        out[f"{name}ratio_max"] = round(max(ratios), 3)
        total = sum(c for c, _ in sizes) / sum(u[i] for _, u in sizes)
        out[f"{name}ratio_of_totals"] = round(total, 3)
    return out


async def measure(server: Any, qs: list[str], units: list[str], k: int) -> dict[str, Any]:
    from anygrain.integrations.mcp import MCP_MAJOR

    if MCP_MAJOR >= 2:
        import mcp

        client: Any = mcp.Client(server)
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        client = create_connected_server_and_client_session(server._mcp_server)
    out: dict[str, Any] = {}
    async with client as c:
        for unit in units:
            sizes: dict[str, list[Size]] = {}
            for q in qs:
                for form in ("compact", "full"):
                    args = {"query": q, "k": k, "unit": unit, "format": form}
                    r = await c.call_tool("search", args)
                    if r.is_error if MCP_MAJOR >= 2 else r.isError:
                        raise SystemExit(f"{unit} {form}: {r.content[0].text}")
                    body = r.structured_content if MCP_MAJOR >= 2 else r.structuredContent
                    unique = unique_chars(body)
                    sizes.setdefault(form, []).append((len(r.content[0].text), unique))
                    if form == "full":
                        indented = json.dumps(body, indent=2, ensure_ascii=False)
                        sizes.setdefault("full_indented", []).append((len(indented), unique))
            out[unit] = {form: summary(s) for form, s in sizes.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index", nargs="?", help="a phrase index of SQuAD dev (default: built)")
    ap.add_argument("--squad", type=Path, default=SQUAD)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "anygrain-mcp")
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--units", default="phrase,answer")
    a = ap.parse_args()

    from anygrain.integrations.mcp import create_server

    path = phrase_index(a.index, a.squad, a.work)
    qs = questions(a.squad, a.questions)
    server = create_server(path, threads=1)
    units = a.units.split(",")
    t = time.perf_counter()
    result = asyncio.run(measure(server, qs, units, a.k))
    print(
        json.dumps(
            {
                "index": str(path),
                "questions": len(qs),
                "k": a.k,
                "seconds": round(time.perf_counter() - t, 1),
                **result,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
