"""The ``anygrain`` command: thin wrappers over the Python API.

Each command parses its options, calls one API function and prints the
result; errors anygrain raises on purpose are printed without a traceback.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from anygrain.cli_common import console, fail, out
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.search.hit import Unit
from anygrain.search.scope import Scope

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Dense retrieval at any grain: phrases, sentences, passages, documents.",
)


def model_option(index_dir: Path, model: str | None) -> dict[str, Any]:
    """``Index.load`` options for ``--model``: a question-side model replacing the index's own
    (the index checks that it makes the same passage or phrase vectors)."""
    if model is None:
        return {}
    from anygrain.search.index import IndexKind, read_manifest

    kind = read_manifest(index_dir).get("kind")
    if kind not in (IndexKind.DENSE.value, IndexKind.PHRASE.value):
        raise AnygrainError(f"{index_dir}: --model needs a dense or phrase index, not {kind}")
    return {"model": model}


@app.command("index")
def index_cmd(
    source: Annotated[
        str, typer.Argument(help="Corpus: PATH, FORMAT:PATH, or an existing corpus directory")
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Index directory to write")],
    kind: Annotated[str, typer.Option(help="bm25 | dense | hybrid | phrase")] = "bm25",
    split: Annotated[str, typer.Option(help="auto | paragraph | w100 | chars:N")] = "auto",
    lang: Annotated[str | None, typer.Option(help="en | zh (detected when omitted)")] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Encoder: alias (minilm, me5-small), hub name or directory"),
    ] = None,
    faiss: Annotated[
        str | None,
        typer.Option("--faiss", help="FAISS factory string (default: chosen from corpus size)"),
    ] = None,
    threshold: Annotated[
        float | None, typer.Option(help="Phrase filter threshold tau (phrase indexes)")
    ] = None,
    on_error: Annotated[
        ErrorPolicy,
        typer.Option("--on-error", help="stop at a malformed record, or skip and count it"),
    ] = ErrorPolicy.STOP,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    """Build an index from a corpus."""
    from anygrain.search.index import Index

    errors = ErrorLog(on_error)
    settings: dict[str, Any] = {
        "split": split,
        "lang": lang,
        "errors": errors,
        "progress": not quiet,
    }
    if model:
        settings["model"] = model
    if faiss:
        settings["factory"] = faiss
    if threshold is not None:
        settings["threshold"] = threshold
    try:
        idx = Index.build(source, kind=kind, out=out_dir, **settings)
    except (AnygrainError, ValueError) as e:
        fail(e)
        return
    if errors.n_skipped:
        console.print(f"[yellow]{errors.summary()}[/]", soft_wrap=True)
    c = idx.corpus
    console.print(
        f"indexed {len(c)} passages from {c.n_documents} documents ({c.manifest['source_format']}) as {idx.kind.value} → {out_dir}"
    )


@app.command("search")
def search_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
    query: Annotated[str, typer.Argument(help="The question")],
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
) -> None:
    """Search an index with one question (phrase indexes: answer phrases in their context)."""
    from anygrain.api import search_index
    from anygrain.cli_phrase import print_phrase_hits
    from anygrain.search.index import Index, IndexKind

    try:
        idx = Index.load(index_dir, **model_option(index_dir, model))
        hits = search_index(idx, [query], k, unit=unit)[0]
    except AnygrainError as e:
        fail(e)
        return
    if idx.kind is IndexKind.PHRASE:
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
            help="corpus, or gold-passage (D={p}, phrase indexes: each question in its own passage)"
        ),
    ] = Scope.CORPUS,
) -> None:
    """Evaluate an index on a question set."""
    from anygrain.api import evaluate_index
    from anygrain.search.index import Index, IndexKind

    errors = ErrorLog(on_error)
    try:
        idx = Index.load(index_dir, **model_option(index_dir, model))
        report = evaluate_index(
            idx,
            questions,
            metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
            k=k,
            run_out=run_out,
            drop_empty=drop_empty,
            limit=limit,
            errors=errors,
            progress=not quiet and not as_json,
            unit=unit,
            scope=scope,
        )
    except AnygrainError as e:
        fail(e)
        return
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]", soft_wrap=True)
    d = report.to_dict()
    if idx.kind is IndexKind.PHRASE:
        d["scope"], d["unit"] = scope.value, Unit(unit or Unit.PHRASE).value
    if as_json:
        print(json.dumps(d, ensure_ascii=False))
        return
    table = Table(title=f"{index_dir} on {questions} ({d['n_questions']} questions)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, v in d["metrics"].items():
        table.add_row(name, f"{v:.4f}")
    out.print(table)


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
    kind: Annotated[str, typer.Option(help="Index kind for the demo")] = "bm25",
) -> None:
    """Index CPython's bundled reference topics (offline) and answer a few questions."""
    from anygrain.api import run_demo

    try:
        result = run_demo(out_dir, kind=kind, progress=True)
    except AnygrainError as e:
        fail(e)
        return
    for q, hits in result.answers:
        top = hits[0] if hits else None
        snippet = (top.text[:160].replace("\n", " ") + "…") if top else "(no hit)"
        out.print(
            f"[bold]Q:[/] {q.text}\n   [green]{top.title if top else ''}[/] {snippet}",
            highlight=False,
        )
    print(json.dumps(result.report.to_dict()))


def _register_groups() -> None:
    # Command groups live beside their API; each module is thin like this one.
    from anygrain.cli_phrase import refilter_cmd, train_phrase_cmd, train_query_side_cmd
    from anygrain.cli_reader import ask_cmd, eval_reader_cmd, train_reader_cmd
    from anygrain.cli_serve import serve_cmd
    from anygrain.cli_train import train_app

    train_app.command("phrase")(train_phrase_cmd)
    train_app.command("reader")(train_reader_cmd)
    train_app.command("phrase-query-side")(train_query_side_cmd)
    app.command("refilter")(refilter_cmd)
    app.command("ask")(ask_cmd)
    app.command("eval-reader")(eval_reader_cmd)
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
    app()


if __name__ == "__main__":
    main()
