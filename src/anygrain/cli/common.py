"""What every CLI module shares: the consoles, the one way errors are printed, the options
several commands take (threads, device, --overwrite, ...), options generated from a config
dataclass, and the one way a trainer is run from the command line."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape

from anygrain.corpus.splitters import split_help
from anygrain.encode.runtime import Runtime
from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy
from anygrain.train.saved_config import BF16_HELP
from anygrain.utils.checksums import Verify

# emoji=False: error text and paths are printed as they are (rich would turn ":abc:" in
# "cuda:abc:" or a path into an emoji); markup is escaped where text is printed
console = Console(stderr=True, emoji=False)
out = Console(emoji=False)

# Options with the same meaning in several commands (each sets its own default); a trainer's
# own options come from its config (config_options).
BF16Opt = Annotated[bool, typer.Option("--bf16/--no-bf16", help=BF16_HELP)]
# every command that encodes or searches: torch's and FAISS's pools, set by the API
ThreadsOpt = Annotated[
    Optional[int],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(
        "--threads",
        help="CPU threads for torch and FAISS (default: theirs, which follow "
        "OMP_NUM_THREADS); 1 on a CPU shared with other jobs",
    ),
]
DeviceOpt = Annotated[
    Optional[str],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(
        "--device",
        help="Where models run: auto (a CUDA GPU when torch sees one, else the CPU), cpu, "
        "cuda or cuda:N",
    ),
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume/--no-resume", help="Continue from the last checkpoint in --out")
]
OnErrorOpt = Annotated[
    ErrorPolicy,
    typer.Option("--on-error", help="stop at a malformed record, or skip and count it"),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="Replace the anygrain index already in --out")
]
VerifyOpt = Annotated[
    Verify,
    typer.Option(
        help="Check the index files on open: sizes | small (files <= 64 MB, and model weights whatever their size, once per process) | full"
    ),
]
SPLIT_HELP = split_help()
# what encodes: the questions (and the answer grain's reader) of a search, or a corpus
RuntimeOpt = Annotated[
    Optional[Runtime],  # noqa: UP045  (typer reads the annotation at run time)
    typer.Option(
        "--runtime",
        help="What encodes the questions and runs the reader of the answer grain: auto (ONNX "
        "Runtime on a CPU where onnxruntime is installed, the graph exported once and "
        "cached; else torch; the reader on torch where the CPU has native bfloat16), onnx or "
        "torch",
    ),
]
BuildRuntimeOpt = Annotated[
    Optional[Runtime],  # noqa: UP045
    typer.Option(
        "--runtime",
        help="What encodes the passages (phrase, dense, hybrid): auto (dense: ONNX Runtime on a "
        "CPU where onnxruntime is installed, the graph exported once and cached, else torch; "
        "phrase: torch, faster than ONNX Runtime for its passages), onnx or torch. Not "
        "recorded: both write the same vectors",
    ),
]


def fail(e: Exception) -> NoReturn:
    """Print an anygrain error as one unwrapped line (no traceback) and exit with status 2.

    Escaped, so paths or ids with brackets are not read as markup; not wrapped, so the
    file, line and field stay on one line for people and for scripts that grep them.
    """
    console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


BatchSizeOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--batch-size",
        help="Questions encoded at once (dense, hybrid, phrase; default: the index's, "
        "32 for dense)",
    ),
]


def at_least_one(option: str, value: int | None) -> None:
    """Refuse a count option below 1 (``--batch-size``, ``--fusion-depth``) by its name."""
    if value is not None and value < 1:
        raise AnygrainError(f"{option} must be at least 1, got {value}")


def run_trainer(train: Callable[[ErrorLog], Path], on_error: ErrorPolicy, what: str) -> Path:
    """Run ``train(errors)`` as a command: errors as one line (exit 2), Ctrl-C as exit 130
    after the trainer's checkpoint, skipped records counted, then ``what → path``."""
    errors = ErrorLog(on_error)
    try:
        path = train(errors)
    except (AnygrainError, ValueError) as e:
        fail(e)
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted; a checkpoint was saved: rerun the same command to resume[/]"
        )
        raise typer.Exit(130) from None
    if errors.n_skipped:
        console.print(f"[yellow]{escape(errors.summary())}[/]")
    console.print(f"{what} → {escape(str(path))}")
    return path


#: a trainer as a ``train`` command hands it to :func:`trainer_command`, its config bound
Trainer = Callable[..., Path]


def trainer_command(
    what: str, then: Callable[[Path], None] | None = None
) -> Callable[[Callable[..., Trainer]], Callable[..., None]]:
    """A ``train`` command from ``command``, which takes the command's own options and
    returns its trainer, called as ``trainer(progress=, resume=, errors=)``: every trainer
    takes ``--resume``, ``--on-error`` and ``--quiet`` (after the command's own options)
    and runs as :func:`run_trainer` runs it, ``then(path)`` after."""
    run_options = {
        "resume": (ResumeOpt, True),
        "on_error": (OnErrorOpt, ErrorPolicy.STOP),
        "quiet": (QuietOpt, False),
    }

    def decorate(command: Callable[..., Trainer]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True).parameters.values()
        keyword = inspect.Parameter.KEYWORD_ONLY
        params = [p.replace(kind=keyword) for p in own if p.kind is not p.VAR_KEYWORD]
        params += [
            inspect.Parameter(n, keyword, default=d, annotation=a)
            for n, (a, d) in run_options.items()
        ]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            resume, on_error, quiet = (kwargs.pop(n) for n in run_options)

            def train(errors: ErrorLog) -> Path:
                # the command's own checks inside: a refusal is one line, as the trainer's
                return command(**kwargs)(progress=not quiet, resume=resume, errors=errors)

            path = run_trainer(train, on_error, what)
            if then is not None:
                then(path)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def config_options(
    config_cls: type,
    names: Sequence[str] | None = None,
    *,
    optional: Collection[str] = (),
    lead: int = 0,
    helps: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command one option per named field of the dataclass ``config_cls`` (every
    field when ``names`` is None), so an option is written once, in its config.

    Each option takes its type and default from the field, and from the field's
    ``metadata``: ``help``; ``cli``, its declarations (default ``--field-name``, and
    ``--x/--no-x`` for a bool); ``choices``, an enum the value is checked against and
    handed on as its ``.value``; ``argument``, a positional argument instead; ``path``, a
    :class:`~pathlib.Path` handed on as a string; ``min`` and ``metavar``, as typer takes
    them.  The command receives the values as ``**settings`` keyed by field name (a list
    left out as ``[]``); ``optional`` fields default to ``None`` though the config needs
    them (a recipe may supply them).  A command whose option means something of its own
    there says so with ``helps`` and ``defaults`` (by field name).  The generated options
    follow the command's first ``lead`` parameters and precede the rest; decorators stacked
    on one command add their options in the order they are written.
    """
    hints = typing.get_type_hints(config_cls)
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    names = list(fields) if names is None else names
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise TypeError(f"{config_cls.__name__} has no field(s) {', '.join(unknown)}")
    lists = {n for n in names if typing.get_origin(hints[n]) is list}
    helps, defaults = helps or {}, defaults or {}

    def parameter(name: str) -> inspect.Parameter:
        f, meta = fields[name], fields[name].metadata
        choices: type[enum.Enum] | None = meta.get("choices")
        tp: Any = Path if meta.get("path") else choices or hints[name]
        default: Any = inspect.Parameter.empty
        if name in defaults:
            default = defaults[name]
        elif name in optional or f.default_factory is not dataclasses.MISSING:
            default = None
        elif f.default is not dataclasses.MISSING:
            default = choices(f.default) if choices and f.default is not None else f.default
        if default is None and not _is_optional(tp):
            tp = Optional[tp]  # noqa: UP045  (typer reads the annotation at run time)
        info: Any
        help_ = helps.get(name, meta["help"])
        if meta.get("argument"):
            info = typer.Argument(help=help_)
        else:
            extra = {k: meta[k] for k in ("min", "metavar") if k in meta}
            info = typer.Option(_declarations(name, meta, tp), help=help_, **extra)
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[tp, info]
        )

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(command, eval_str=True).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        params = own[:lead] + [parameter(n) for n in names] + own[lead:]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            settings = {n: kwargs.pop(n) for n in names}
            for n, v in settings.items():
                if v is None and n in lists:
                    settings[n] = []
                elif isinstance(v, Path):
                    settings[n] = str(v)
                elif isinstance(v, enum.Enum) and "choices" in fields[n].metadata:
                    settings[n] = v.value
            command(**kwargs, **settings)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def option_name(config_cls: type, name: str) -> str:
    """How the command line spells the option :func:`config_options` makes of the field
    ``name`` (``--keep-dump/--no-keep-dump``), for messages that name it."""
    f = next(f for f in dataclasses.fields(config_cls) if f.name == name)
    return _declarations(name, f.metadata, typing.get_type_hints(config_cls)[name])


def given_options(config_cls: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``config_cls`` in ``settings`` that were given: set to something
    other than their field's default."""
    return {
        f.name: settings[f.name]
        for f in dataclasses.fields(config_cls)
        if f.name in settings and settings[f.name] != f.default
    }


def take_options(config_cls: type, settings: dict[str, Any]) -> dict[str, Any]:
    """The options of ``config_cls`` in ``settings`` (given or not) taken out of it, where a
    command's ``**settings`` gathers several groups :func:`config_options` made."""
    names = [f.name for f in dataclasses.fields(config_cls) if f.name in settings]
    return {n: settings.pop(n) for n in names}


def _declarations(name: str, meta: Mapping[str, Any], tp: Any) -> str:
    flag = "--" + name.replace("_", "-")
    return str(meta.get("cli") or (f"{flag}/--no-{flag[2:]}" if tp is bool else flag))


def _is_optional(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)
