"""How an index records the model it was built with: one policy for every kind.

An index either carries a copy of its model's weights (``model.path``, inside the index)
or refers to the model by what it was given as (``model.ref``), beside the fingerprint
that opening checks the weights it finds against.  The rule, for dense and phrase indexes
alike: a model given by name is referenced by that name, a directory or an in-memory model
copied; ``copy_model=True`` always copies; ``copy_model=False`` never does (a directory is
referenced by its absolute path, and an in-memory model, which has neither name nor path,
is refused).  What counts as a name is the kind's (its models load differently).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from anygrain.errors import IndexMismatchError, UsageError


def model_reference(
    model: object,
    copy_model: bool | None,
    *,
    by_name: Callable[[str | Path], bool],
    noun: str = "model",
) -> str:
    """What an index records to find ``model`` again instead of copying it ("": copy it).

    ``model`` is a name or directory (``str`` or ``Path``) or an in-memory model (anything
    else); ``by_name`` says whether a name or directory is a name, as the kind loads it;
    ``noun`` names the model in the error refusing an in-memory one."""
    if copy_model:
        return ""
    if not isinstance(model, str | Path):
        if copy_model is False:
            raise UsageError(
                f"copy_model=False needs a {noun} given by name or directory: an in-memory "
                "model has neither for the index to record; save it (model.save(DIR)) and "
                "pass DIR, or let the index copy it (copy_model=None or True)"
            )
        return ""
    if by_name(model):
        return str(model)
    return str(Path(model).expanduser().resolve()) if copy_model is False else ""


def model_location(fingerprint: str, base_model: str, *, ref: str, copy: str) -> dict[str, Any]:
    """The ``model`` an index's ``index.json`` records: the fingerprint its weights must
    have, their base model, and where they are: ``ref`` (the reference) or, when it is
    empty, ``copy`` (the copy's path inside the index)."""
    return {
        "fingerprint": fingerprint,
        "base_model": base_model,
        **({"ref": ref} if ref else {"path": copy}),
    }


def check_named_model(
    path: Path, record: dict[str, Any], got: str | None, *, noun: str, has: str
) -> None:
    """Refuse the model an index at ``path`` refers to by name (``record``: its ``model``)
    when that name now loads weights of another fingerprint (``got``; ``has`` says which
    weights) than the index was built with: another model behind the same name is never
    used in its place.  ``noun`` is what the kind calls its model."""
    want = record.get("fingerprint")
    if got != want:
        raise IndexMismatchError(
            f"{path}: the {noun} {record['ref']!r} now has {has} {got}, not the {want} this "
            f"index was built with (base {record.get('base_model')!r}); another model behind "
            "the same name is never used in its place. Pass the model the index was built "
            "with (--model DIR, or Index.load(path, model=DIR)), or rebuild the index."
        )
