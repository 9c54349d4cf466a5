"""The panels a command's ``--help`` groups its options in (typer's ``rich_help_panel``).

Options are declared once and shared by several commands (:mod:`anygrain.cli.common`,
:mod:`anygrain.cli.kind_options`), while which panel an option belongs in is the command's
say: :func:`with_panels` sets each named parameter's panel on a copy of its declaration,
so one command's panels never change another's (and :func:`with_helps` a command's own
help of a shared option, the same way).
"""

from __future__ import annotations

import copy
import functools
import inspect
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Annotated, Any

from typer.models import ParameterInfo

INPUT = "Input"
MODEL = "Model"
KIND = "Index kind"
PHRASE = "Phrase options"
SEARCH = "Search"
ANSWER = "Answer grain"
EVALUATION = "Evaluation"
TRAINING = "Training"
RAY = "Encoding on Ray"
OUTPUT = "Output"
PERFORMANCE = "Performance"

#: the kinds' search options (:func:`anygrain.cli.search.with_search_options`), as
#: ``search`` and ``eval`` show them
HYBRID_SEARCH = ("fusion", "weight", "depth")
PHRASE_SEARCH = (
    "sparse_weight",
    "rescore",
    "rescore_margin",
    "rescore_tokens",
    "rescore_context",
    "rescore_bf16",
)


def with_panels(
    panels: Mapping[str, Sequence[str]],
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Put each parameter named in ``panels`` (panel title -> parameter names) in that
    panel of the command's ``--help``, the panels and their options in the order given
    (after the parameters named in none: the arguments); a name the command does not take
    is a :class:`TypeError` at import, so a renamed option cannot drop out of its panel.
    Outermost of a command's decorators: it sees the options the others add."""
    named = {n: panel for panel, names in panels.items() for n in names}

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        sig = _signature(command, named)
        # keyword-only, as typer calls a command: free to be listed panel by panel
        given = {
            n: _declared(p.replace(kind=inspect.Parameter.KEYWORD_ONLY), named.get(n))
            for n, p in sig.parameters.items()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        }
        params = [p for n, p in given.items() if n not in named]
        params += [given[n] for names in panels.values() for n in names]
        return _redeclared(command, sig.replace(parameters=params))

    return decorate


def with_helps(helps: Mapping[str, str]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give each option named in ``helps`` (parameter name -> help) the command's own help:
    an option declared once for several commands that means something else in this one
    (``serve``'s ``--threads``, per stage); the shared declaration is left as it was."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        sig = _signature(command, helps)
        params = [_declared(p, help=helps.get(n)) for n, p in sig.parameters.items()]
        return _redeclared(command, sig.replace(parameters=params))

    return decorate


def _signature(command: Callable[..., None], named: Collection[str]) -> inspect.Signature:
    """``command``'s signature, which must take every parameter ``named``."""
    sig = inspect.signature(command, eval_str=True)
    unknown = sorted(set(named) - set(sig.parameters))
    if unknown:
        raise TypeError(f"{command.__name__} has no parameter(s) {', '.join(unknown)}")
    return sig


def _redeclared(command: Callable[..., None], sig: inspect.Signature) -> Callable[..., None]:
    """``command`` as typer sees it with the parameters of ``sig``."""

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        command(**kwargs)

    wrapper.__signature__ = sig  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}
    return wrapper


def _declared(
    p: inspect.Parameter, panel: str | None = None, help: str | None = None
) -> inspect.Parameter:
    """``p`` in ``panel`` or with ``help`` (None: as it is), on a copy of its declaration."""
    if (panel is None and help is None) or typing.get_origin(p.annotation) is not Annotated:
        return p
    tp, *meta = typing.get_args(p.annotation)
    moved = []
    for m in meta:
        if isinstance(m, ParameterInfo):
            m = copy.copy(m)  # the declaration may be shared with other commands
            if panel is not None:
                m.rich_help_panel = panel
            if help is not None:
                m.help = help
        moved.append(m)
    return p.replace(annotation=Annotated[(tp, *moved)])  # type: ignore[valid-type]
