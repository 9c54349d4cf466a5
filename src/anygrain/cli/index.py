"""``anygrain index``, ``verify``, ``refilter`` and ``formats``: building indexes and checking
them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from anygrain.cli.common import (
    SPLIT_HELP,
    DeviceOpt,
    OnErrorOpt,
    QuietOpt,
    ThreadsOpt,
    console,
    fail,
    out,
)
from anygrain.composite.fusion import FusionMethod
from anygrain.corpus.script import Script
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.index.base import IndexKind
from anygrain.phrase.options import Compress


def _index_summary(idx: Any, out_dir: Path, errors: ErrorLog) -> dict[str, Any]:
    """What ``index`` reports (from ``Index.summary``): counts, kind, where, the model used
    (its name), the shards or fusion of the kinds that have them, the files read."""
    s = idx.summary()
    corpus = s["corpus"]
    d: dict[str, Any] = {
        "kind": s["kind"],
        "out": str(out_dir),
        "n_passages": corpus["n_passages"],
        "n_documents": corpus["n_documents"],
        "source_format": corpus["source_format"],
    }
    model = s["model"] or {}
    if model.get("name") or model.get("base_model"):
        d["model"] = model.get("name") or model["base_model"]
    d.update({key: s[key] for key in ("shards", "fusion", "components") if key in s})
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
    copy_model: Annotated[
        bool | None,
        typer.Option(
            "--copy-model/--no-copy-model",
            help="Dense, hybrid and phrase: carry a copy of the model in the index "
            "(default: only for a model given as a directory; a name, such as a shipped "
            "model's, is recorded and resolved on open)",
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
        Optional[Compress],  # noqa: UP045 -- typer reads the annotation at runtime
        typer.Option(
            help="Phrase indexes: quantize the FAISS vectors (spans scored decoded; "
            "default: the phrase kind's, see docs/cli.md)"
        ),
    ] = None,
    keep: Annotated[
        float | None,
        typer.Option(
            help="Phrase indexes, instead of --threshold: keep about this fraction of the "
            "start and end vectors (the filter's trade-off of size against accuracy)"
        ),
    ] = None,
    pq_m: Annotated[
        int | None, typer.Option("--pq-m", help="opq-pq: bytes per vector (default dim/8)")
    ] = None,
    memory_budget: Annotated[
        str | None,
        typer.Option(
            "--memory-budget",
            help="Phrase indexes: resident memory the build may use, e.g. 1.5G (the "
            "default); sets shard and batch sizes and builds FAISS in blocks",
        ),
    ] = None,
    keep_dump: Annotated[
        bool | None,
        typer.Option(
            "--keep-dump/--no-keep-dump",
            help="Phrase indexes: keep the float16 vectors (default: only with --compress none)",
        ),
    ] = None,
    sparse: Annotated[
        bool | None,
        typer.Option(
            "--sparse/--no-sparse",
            help="Phrase indexes: fuse a BM25 score of each phrase's passage (default on)",
        ),
    ] = None,
    sparse_from: Annotated[
        Path | None,
        typer.Option(
            "--sparse-from",
            help="Phrase indexes: copy this BM25 index (same corpus) as the lexical part",
        ),
    ] = None,
    sparse_weight: Annotated[
        float | None,
        typer.Option(
            "--sparse-weight", help="Phrase indexes: weight of the BM25 part (0: dense only)"
        ),
    ] = None,
    rescore: Annotated[
        int | None,
        typer.Option(
            "--rescore",
            help="Phrase indexes: passages each search re-encodes and re-scores exactly by "
            "default (its top N; 0 or unset: none)",
        ),
    ] = None,
    bm25_k1: Annotated[
        float | None,
        typer.Option(
            "--bm25-k1",
            help="BM25 (bm25, and hybrid's BM25 part): term-frequency saturation k1 (default 0.9)",
        ),
    ] = None,
    bm25_b: Annotated[
        float | None,
        typer.Option(
            "--bm25-b",
            help="BM25 (bm25, and hybrid's BM25 part): length normalisation b, 0 to 1 "
            "(default 0.4)",
        ),
    ] = None,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    device: DeviceOpt = None,
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
    ray_timeout: Annotated[
        float | None,
        typer.Option(
            "--ray-timeout",
            metavar="SECONDS",
            help="With --ray auto or HOST:PORT: how long to wait for the cluster to answer "
            "before failing (default 30)",
        ),
    ] = None,
) -> None:
    """Build an index from a corpus (or a hybrid index from a BM25 and a dense index)."""
    from anygrain import api

    errors = ErrorLog(on_error)
    fuse: dict[str, Any] = {}
    if fusion is not None:
        fuse["fusion"] = fusion
    if fusion_weight is not None:
        fuse["weight"] = fusion_weight
    if fusion_depth is not None:
        fuse["depth"] = fusion_depth
    try:
        if from_dirs:
            if kind is not IndexKind.HYBRID:
                raise AnygrainError("--from needs --kind hybrid")
            if len(from_dirs) != 2 or source is not None:
                raise AnygrainError(
                    "--kind hybrid --from takes exactly two index directories "
                    "(--from BM25_DIR --from DENSE_DIR) and no SOURCE"
                )
            if model or faiss or lang or split != "auto" or copy_model is not None:
                raise AnygrainError(
                    "--model, --copy-model, --faiss, --lang and --split apply when encoding; "
                    "--from reuses the indexes as they were built"
                )
            # what shapes a build's parts cannot change parts built already: refused, never
            # dropped (--bm25-b was accepted and ignored)
            built_with = {
                "--bm25-k1": bm25_k1,
                "--bm25-b": bm25_b,
                "--threshold": threshold,
                "--keep": keep,
                "--compress": compress,
                "--pq-m": pq_m,
                "--memory-budget": memory_budget,
                "--keep-dump/--no-keep-dump": keep_dump,
                "--sparse/--no-sparse": sparse,
                "--sparse-from": sparse_from,
                "--sparse-weight": sparse_weight,
                "--rescore": rescore,
                "--ray": ray_address,
                "--workers": ray_workers,
                "--retries": ray_retries,
                "--ray-timeout": ray_timeout,
                "--device": device,
            }
            given = [name for name, v in built_with.items() if v is not None]
            if shards != 1:
                given.append("--shards")
            if given:
                raise AnygrainError(
                    f"{', '.join(given)}: {'applies' if len(given) == 1 else 'apply'} when "
                    "building from a corpus; --kind hybrid --from combines the two indexes as "
                    "they were built (rebuild the BM25 index to change its k1 or b)"
                )
            idx = api.combine_hybrid(
                from_dirs[0], from_dirs[1], out_dir, overwrite=overwrite, threads=threads, **fuse
            )
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
            if copy_model is not None:
                settings["copy_model"] = copy_model
            if faiss:
                settings["factory"] = faiss
            if threshold is not None:
                settings["threshold"] = threshold
            if ray_address is not None:
                settings["executor"] = api.ray_executor(
                    kind, ray_address, workers=ray_workers, retries=ray_retries, timeout=ray_timeout
                )
            elif ray_workers is not None or ray_retries is not None:
                raise AnygrainError("--workers and --retries apply with --ray")
            elif ray_timeout is not None:
                raise AnygrainError("--ray-timeout applies with --ray")
            # only the options given: a kind without them refuses them by name
            # (Index.build checks its settings: --fusion* on a kind other than hybrid, say)
            if compress is not None:
                settings["compress"] = compress
            if keep is not None:
                settings["keep"] = keep
            if pq_m is not None:
                settings["pq_m"] = pq_m
            if memory_budget is not None:
                settings["memory_budget"] = memory_budget
            if keep_dump is not None:
                settings["keep_dump"] = keep_dump
            if device is not None:
                settings["device"] = device
            if sparse is not None:
                settings["sparse"] = sparse
            if sparse_from is not None:
                settings["sparse_from"] = str(sparse_from)
            if sparse_weight is not None:
                settings["sparse_weight"] = sparse_weight
            if rescore is not None:
                settings["rescore"] = rescore
            if bm25_k1 is not None:
                settings["k1"] = bm25_k1
            if bm25_b is not None:
                settings["b"] = bm25_b
            idx = api.build_index(
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


def verify_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
) -> None:
    """Check every file of an index against the checksums recorded when it was built,
    then open it as search does.

    Lists each damaged, missing or unexpected file; exits 1 when there is any.  An index
    whose files match but that search would refuse (an edited index.json: another
    corpus, an unknown kind or version) is one error line, exit 2, as search says it."""
    from anygrain.api import verify_index

    try:
        # when every file matches, the index is also opened as search opens it
        check = verify_index(index_dir)
    except AnygrainError as e:
        fail(e)
    for p in check.problems:
        out.print(escape(str(p)), highlight=False, soft_wrap=True)
    if check.problems:
        console.print(
            f"[bold red]{len(check.problems)} problem(s)[/] in {escape(str(index_dir))}; "
            "rebuild the index",
            highlight=False,
        )
        raise typer.Exit(1)
    out.print(
        f"ok: {check.n_files} files match their checksums and the index opens", highlight=False
    )


def refilter_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Phrase index to start from")],
    out_dir: Annotated[Path, typer.Option("--out", help="New phrase index directory")],
    threshold: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Filter threshold tau (a logit; at least the source's)"),
    ] = None,
    keep: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Instead of --threshold: keep about this fraction of the vectors"),
    ] = None,
    faiss: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--faiss", help="FAISS factory (default: chosen from the new size)"),
    ] = None,
    compress: Annotated[
        Compress, typer.Option(help="Quantize the new index's FAISS vectors")
    ] = Compress.NONE,
    pq_m: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--pq-m", help="opq-pq: bytes per vector (default dim/8)"),
    ] = None,
    keep_dump: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option(
            "--keep-dump/--no-keep-dump",
            help="Keep the float16 vectors (default: only with --compress none)",
        ),
    ] = None,
    rescore: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--rescore",
            help="Passages each search re-encodes and re-scores exactly by default "
            "(default: the source's; 0: none)",
        ),
    ] = None,
    quiet: QuietOpt = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the anygrain index already in --out")
    ] = False,
) -> None:
    """A smaller phrase index at a higher filter threshold, from stored vectors (no re-encoding)."""
    from anygrain.api import refilter_index

    try:
        idx = refilter_index(
            index_dir,
            out_dir,
            threshold,
            keep=keep,
            factory=faiss,
            progress=not quiet,
            overwrite=overwrite,
            compress=compress,
            pq_m=pq_m,
            keep_dump=keep_dump,
            rescore=rescore,
        )
    except AnygrainError as e:
        fail(e)
        return
    c = idx.manifest["counts"]
    console.print(
        f"threshold {idx.manifest['settings']['threshold']:.4f}: {c['vectors_per_passage']} vectors per passage, "
        f"{c['bytes_per_passage']:.0f} bytes per passage → {out_dir}"
    )


def formats_cmd() -> None:
    """List the source formats anygrain reads."""
    from anygrain.api import source_formats

    for f in source_formats():
        what = "+".join(
            x for x, fn in (("documents", f.read_documents), ("questions", f.read_questions)) if fn
        )
        out.print(f"[bold]{f.name:12}[/] {what:20} {f.description}", highlight=False)


def convert_script_cmd(
    source: Annotated[
        Path, typer.Argument(help="SQuAD-format JSON file (SQuAD, CMRC 2018, DRCD, XQuAD)")
    ],
    target: Annotated[Path, typer.Argument(help="Where to write the converted file")],
    to: Annotated[Script, typer.Option("--to", help="Script to convert to")] = Script.SIMPLIFIED,
) -> None:
    """Convert a Chinese SQuAD-format file to Simplified or Traditional characters (OpenCC),
    keeping answer offsets valid; needs OpenCC (the `zh` extra)."""
    from anygrain.api import convert_script

    try:
        rep = convert_script(source, target, to)
    except AnygrainError as e:
        fail(e)
    except OSError as e:  # anything the converter did not name: the path and why, one line
        fail(AnygrainError(f"{e.filename or target}: {e.strerror or e}"))
    out.print(
        f"{rep.paragraphs} paragraphs, {rep.questions} questions, {rep.answers} answers: "
        f"{rep.changed_characters} characters converted to {to.value} → {escape(str(target))}",
        highlight=False,
    )
