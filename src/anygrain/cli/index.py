"""``anygrain index``, ``verify``, ``refilter`` and ``formats``: building indexes and checking
them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from anygrain.cli import panels
from anygrain.cli.common import (
    BuildRuntimeOpt,
    DeviceOpt,
    OnErrorOpt,
    OverwriteOpt,
    QuietOpt,
    ThreadsOpt,
    config_options,
    console,
    fail,
    given_options,
    option_name,
    out,
)
from anygrain.cli.kind_options import (
    Bm25Options,
    EncodingOptions,
    FusionOptions,
    PhraseOptions,
    RayOptions,
    RecordFieldOptions,
)
from anygrain.cli.panels import with_panels
from anygrain.corpus.script import Script
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy, FileNote
from anygrain.index.registry import IndexKind
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
    d.update({key: s[key] for key in ("shards", "fusion", "components", "encoding") if key in s})
    if errors.files:
        d["files"] = {
            "read": [f.path for f in errors.files if f.read],
            "skipped": [{"path": f.path, "reason": f.reason} for f in errors.files_skipped],
            "summary": errors.files_summary(),
        }
    d["n_skipped_records"] = errors.n_skipped
    return d


#: beyond this many files read, ``index`` says how many of each type, not each one
LIST_READ_FILES = 20


def _counted_only(f: FileNote) -> bool:
    """A file skipped by design, which the summary line counts (``--json`` lists it): one
    unchanged since the index read it, a hidden one, one of a type anygrain does not read."""
    return f.category in ("unchanged", "hidden") or f.category.startswith("unsupported ")


def report_files(errors: ErrorLog, *, quiet: bool) -> None:
    """The files a directory source was read from or skipped, on stderr: each one that
    could not be read with its reason, each one read (unless quiet, or more than
    :data:`LIST_READ_FILES`), then one line counting them by type and by why they were
    skipped."""
    read = sum(f.read for f in errors.files)
    for f in sorted(errors.files, key=lambda f: f.path):
        if f.read and (quiet or read > LIST_READ_FILES) or _counted_only(f):
            continue
        line = escape(str(f))
        console.print(line if f.read else f"[yellow]{line}[/]", highlight=False, soft_wrap=True)
    if errors.files:
        console.print(escape(errors.files_summary()), highlight=False, soft_wrap=True)


#: the groups of options that become the kind's settings, in the order ``index --help``
#: lists them; --from (a hybrid index of two built ones) takes only the fusion
SETTINGS_OPTIONS = (EncodingOptions, FusionOptions, Bm25Options, PhraseOptions)
#: and how the corpus is encoded, on Ray (the build's executor)
BUILD_OPTIONS = (*SETTINGS_OPTIONS, RayOptions)
#: what shapes the parts a build writes: --from cannot change parts built already
BUILT_WITH = (Bm25Options, PhraseOptions, RayOptions)


def with_build_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with every option of :data:`BUILD_OPTIONS` after its first four
    parameters (--out, SOURCE, --kind, --from), handed to it as ``**settings``."""
    for group in reversed(BUILD_OPTIONS):
        command = config_options(group, lead=4)(command)
    return command


@with_panels(
    {
        panels.INPUT: (
            "from_dirs", "split", "lang", "text_field", "id_field", "title_field",
            "meta_fields", "on_error",
        ),
        panels.KIND: ("kind", "shards", "factory", "fusion", "weight", "depth", "k1", "b"),
        panels.MODEL: ("model", "copy_model"),
        panels.PHRASE: (
            "threshold", "keep", "compress", "pq_m", "memory_budget", "keep_dump", "sparse",
            "sparse_from", "sparse_weight", "rescore", "rescore_margin", "rescore_tokens",
            "rescore_context",
        ),
        panels.OUTPUT: ("out_dir", "overwrite", "as_json", "quiet"),
        panels.PERFORMANCE: ("threads", "device", "runtime", "bf16", "int8"),
        panels.RAY: ("address", "workers", "retries", "timeout"),
    }
)  # fmt: skip
@with_build_options
@config_options(RecordFieldOptions, lead=4)
def index_cmd(
    out_dir: Annotated[Path, typer.Option("--out", help="Index directory to write")],
    source: Annotated[
        str | None,
        typer.Argument(
            help="Corpus: PATH, FORMAT:PATH, or an existing corpus directory (none with --from)"
        ),
    ] = None,
    kind: Annotated[IndexKind, typer.Option(help="Index kind")] = IndexKind.BM25,
    from_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--from",
            help="Hybrid from existing indexes: --from BM25_DIR --from DENSE_DIR (same corpus); "
            "nothing is re-encoded",
        ),
    ] = None,
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            min=1,
            help="Build N indexes of --kind over row ranges of the corpus, searched as one "
            "and merged exactly (bm25, dense, phrase)",
        ),
    ] = 1,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    runtime: BuildRuntimeOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as one JSON object on stdout")
    ] = False,
    on_error: OnErrorOpt = ErrorPolicy.STOP,
    quiet: QuietOpt = False,
    overwrite: OverwriteOpt = False,
    **settings: Any,
) -> None:
    """Build an index from a corpus (or a hybrid index from a BM25 and a dense index).

    A folder is read whole: Markdown, reStructuredText, HTML, PDF, DOCX, text, CSV/TSV and
    JSONL files (`anygrain formats`), each hit citing its file, page and heading path."""
    from anygrain import api

    errors = ErrorLog(on_error)
    fields = given_options(RecordFieldOptions, settings)
    try:
        if from_dirs:
            if fields:
                raise AnygrainError(
                    f"--{next(iter(fields)).replace('_', '-')}: --from reads no source"
                )
            _check_combine(
                from_dirs, source, kind, settings, shards=shards, device=device, runtime=runtime
            )
            idx = api.combine_hybrid(
                from_dirs[0],
                from_dirs[1],
                out_dir,
                overwrite=overwrite,
                threads=threads,
                **given_options(FusionOptions, settings),
            )
        else:
            if source is None:
                raise AnygrainError("give a SOURCE to index (or --kind hybrid --from two indexes)")
            build = _build_settings(kind, settings, device=device, runtime=runtime)
            idx = api.build_index(
                source,
                kind=kind,
                out=out_dir,
                threads=threads,
                overwrite=overwrite,
                shards=shards,
                errors=errors,
                progress=not quiet,
                **build,
                **fields,
            )
    except (AnygrainError, ValueError) as e:
        report_files(errors, quiet=True)
        fail(e)
        return
    except OSError as e:  # e.g. permission denied: the path and reason, not a traceback
        fail(AnygrainError(f"{e.filename or out_dir}: {e.strerror or e}"))
        return
    report_files(errors, quiet=quiet)
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]", soft_wrap=True)
    d = _index_summary(idx, out_dir, errors)
    if "model" not in d and settings["model"]:
        d["model"] = settings["model"]  # a phrase index: the phrase model it was encoded with
    _print_index_summary(d, from_dirs, out_dir, as_json)


def _print_index_summary(
    d: dict[str, Any], from_dirs: list[Path] | None, out_dir: Path, as_json: bool
) -> None:
    """``index``'s summary ``d`` on stdout: one JSON object, or one line saying what was built
    (or combined), with what model, where."""
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
    enc = d.get("encoding") or {}
    if enc:  # a phrase build: int8, bf16 or float32, on which runtime
        with_model += f", encoded in {enc['precision']} on {enc['runtime']} ({enc['device']})"
    out.print(f"{what} as {d['kind']}{with_model} → {out_dir}", highlight=False, soft_wrap=True)


def _check_combine(
    from_dirs: list[Path],
    source: str | None,
    kind: IndexKind,
    settings: dict[str, Any],
    *,
    shards: int,
    device: str | None,
    runtime: Runtime | None = None,
) -> None:
    """Refuse what ``--kind hybrid --from`` cannot do: it reuses two built indexes, so any
    option that shapes a build is refused by name, never dropped (--bm25-b was accepted and
    ignored once)."""
    if kind is not IndexKind.HYBRID:
        raise AnygrainError("--from needs --kind hybrid")
    if len(from_dirs) != 2 or source is not None:
        raise AnygrainError(
            "--kind hybrid --from takes exactly two index directories "
            "(--from BM25_DIR --from DENSE_DIR) and no SOURCE"
        )
    if given_options(EncodingOptions, settings):
        raise AnygrainError(
            "--model, --copy-model, --faiss, --lang and --split apply when encoding; "
            "--from reuses the indexes as they were built"
        )
    given = [option_name(g, n) for g in BUILT_WITH for n in given_options(g, settings)]
    given += ["--device"] * (device is not None) + ["--shards"] * (shards != 1)
    given += ["--runtime"] * (runtime is not None)
    if given:
        raise AnygrainError(
            f"{', '.join(given)}: {'applies' if len(given) == 1 else 'apply'} when "
            "building from a corpus; --kind hybrid --from combines the two indexes as "
            "they were built (rebuild the BM25 index to change its k1 or b)"
        )


def _build_settings(
    kind: IndexKind,
    settings: dict[str, Any],
    *,
    device: str | None = None,
    runtime: Runtime | None = None,
) -> dict[str, Any]:
    """The build's settings: the split and language, the options given (a kind that does
    not take one refuses it by name: --fusion on a kind other than hybrid, say), the
    executor of an encode on Ray, and the device and runtime when given."""
    from anygrain import api

    build = {"split": settings["split"], "lang": settings["lang"]}
    for group in SETTINGS_OPTIONS:
        build.update(given_options(group, settings))
    ray = {f.name: settings[f.name] for f in fields(RayOptions)}
    if ray["address"] is not None:
        build["executor"] = api.ray_executor(kind, **ray)
    elif ray["workers"] is not None or ray["retries"] is not None:
        raise AnygrainError("--workers and --retries apply with --ray")
    elif ray["timeout"] is not None:
        raise AnygrainError("--ray-timeout applies with --ray")
    if device is not None:
        build["device"] = device
    if runtime is not None:
        build["runtime"] = runtime.value
    return build


def check_files(index_dir: Path, then: str) -> int:
    """Every file of the index checked against its recorded checksums (and, when all match,
    the index opened as search opens it: a refusal is one error line, exit 2); each
    damaged, missing or unexpected file listed, and exit 1 saying ``then`` when there is
    any.  The number of files checked."""
    from anygrain.api import verify_index

    try:
        check = verify_index(index_dir)
    except AnygrainError as e:
        fail(e)
    for p in check.problems:
        out.print(escape(str(p)), highlight=False, soft_wrap=True)
    if check.problems:
        console.print(
            f"[bold red]{len(check.problems)} problem(s)[/] in {escape(str(index_dir))}; {then}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)
    return check.n_files


def verify_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Index directory")],
) -> None:
    """Check every file of an index against the checksums recorded when it was built,
    then open it as search does.

    Lists each damaged, missing or unexpected file; exits 1 when there is any.  An index
    whose files match but that search would refuse (an edited index.json: another
    corpus, an unknown kind or version) is one error line, exit 2, as search says it."""
    n_files = check_files(index_dir, "rebuild the index")
    out.print(f"ok: {n_files} files match their checksums and the index opens", highlight=False)


#: what ``refilter`` means by the options it shares with ``index``
REFILTER_HELP = {
    "threshold": "Filter threshold tau (a logit; at least the source's)",
    "factory": "FAISS factory (default: chosen from the new size)",
    "compress": "Quantize the new index's FAISS vectors",
    "rescore": "Passages each search re-encodes and re-scores exactly by default "
    "(default: the source's; 0: none)",
    "rescore_margin": "Re-scoring's margin (default: the source's)",
    "rescore_tokens": "Re-scoring's tokens (default: the source's)",
    "rescore_context": "Re-scoring's context in characters (default: the source's)",
}


@config_options(
    PhraseOptions,
    (
        "threshold",
        "keep",
        "compress",
        "pq_m",
        "keep_dump",
        "rescore",
        "rescore_margin",
        "rescore_tokens",
        "rescore_context",
    ),
    lead=2,
    helps=REFILTER_HELP,
    defaults={"compress": Compress.NONE},
)
@config_options(EncodingOptions, ("factory",), lead=2, helps=REFILTER_HELP)
def refilter_cmd(
    index_dir: Annotated[Path, typer.Argument(help="Phrase index to start from")],
    out_dir: Annotated[Path, typer.Option("--out", help="New phrase index directory")],
    quiet: QuietOpt = False,
    overwrite: OverwriteOpt = False,
    **settings: Any,
) -> None:
    """A smaller phrase index at a higher filter threshold, from stored vectors (no re-encoding)."""
    from anygrain.api import refilter_index

    try:
        idx = refilter_index(
            index_dir, out_dir, progress=not quiet, overwrite=overwrite, **settings
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
