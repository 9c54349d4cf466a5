"""Where a command may write: the one output-target check every writer goes through.

A command that writes a file or a directory (a TREC run, a packed model, a training
run, an index) must never destroy what it reads or what anygrain built elsewhere:

* the target is never one of the command's inputs (the same path after resolving
  links, or a hard link to it: the same inode), and a directory that is replaced
  whole never contains one;
* the target is never a symbolic link (:func:`refuse_link`): written through, it puts
  the output wherever the link points;
* the target never lies inside an anygrain artefact -- an index (``index.json`` of
  format ``anygrain.index``), a saved model (one of :data:`MODEL_CONFIG_FILES`) or a
  corpus store (``corpus.json`` of format ``anygrain.corpus``) -- found by walking up
  its parents, unless that artefact is the very thing being written (an index replaced
  with ``--overwrite``, a model a training run continues).

:func:`check_output_file` checks a file target (``eval --run-out``), and
:func:`check_output_dir` a directory one (``pack --out``, the ``--out`` of training);
index builds check theirs with :func:`anygrain.index.manifest.check_build_target`, which
uses the same walk (:func:`enclosing_artefact`).  :func:`unowned_files` lists what a
directory holds beyond the files its owner recorded, so ``--overwrite`` replaces only
an index's own files.

This module reads names and small JSON headers only: it imports neither torch nor an
index kind, so a BM25 evaluation stays light.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.models.forms import MODEL_CONFIG_FILES as _MODEL_CONFIG_FILES
from anygrain.utils.atomic import is_temporary_name

#: the manifest that marks an index directory, and its format
INDEX_MANIFEST = "index.json"
INDEX_FORMAT = "anygrain.index"
#: the file that marks a corpus store, and its format
CORPUS_MANIFEST = "corpus.json"
CORPUS_FORMAT = "anygrain.corpus"
#: the config files that mark a saved model (:data:`anygrain.models.forms.MODEL_FORMS`)
MODEL_CONFIG_FILES = _MODEL_CONFIG_FILES
#: files an operating system leaves in directories it shows, never a user's data
_OS_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})

INDEX, MODEL, CORPUS = "index", "model", "corpus"
_WHAT = {INDEX: "the anygrain index", MODEL: "the saved model", CORPUS: "the corpus directory"}
_AN = {INDEX: "an anygrain index", MODEL: "a saved model", CORPUS: "a corpus directory"}


def _format_of(f: Path) -> Any:
    try:
        with open(f, encoding="utf-8") as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        return None
    return d.get("format") if isinstance(d, dict) else None


def artefact_kind(directory: str | os.PathLike[str]) -> str | None:
    """``"index"``, ``"model"`` or ``"corpus"`` when ``directory`` holds that anygrain
    artefact; None otherwise (a missing path, a file, any other directory)."""
    d = Path(directory)
    if not d.is_dir():
        return None
    if (d / INDEX_MANIFEST).is_file() and _format_of(d / INDEX_MANIFEST) == INDEX_FORMAT:
        return INDEX
    if any((d / name).is_file() for name in MODEL_CONFIG_FILES):
        return MODEL
    if (d / CORPUS_MANIFEST).is_file() and _format_of(d / CORPUS_MANIFEST) == CORPUS_FORMAT:
        return CORPUS
    return None


def resolved(path: str | os.PathLike[str]) -> Path:
    """``path`` with every link resolved; a symbolic link loop (``ln -s loop loop``: Python
    raises RuntimeError or ELOOP) is an :class:`AnygrainError` naming the path, in one line."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as e:
        if isinstance(e, OSError) and e.errno != errno.ELOOP:
            raise
        raise AnygrainError(
            f"{path}: is a symbolic link loop (it leads back to itself); give another path"
        ) from None


def _resolved(path: Path) -> Path:
    """``path`` with its parent resolved but not the last component (a link named as the
    target is replaced by a writer, not followed)."""
    if path.name in ("", ".", ".."):
        return resolved(path)
    return resolved(path.parent) / path.name


def enclosing_artefact(path: str | os.PathLike[str]) -> tuple[str, Path] | None:
    """The outermost anygrain artefact that holds ``path`` (its parents, not ``path``
    itself), as ``(kind, directory)``: the index, not the corpus or model directory
    inside it; None when no parent is one."""
    p = _resolved(Path(path))
    found = None
    for parent in p.parents:
        kind = artefact_kind(parent)
        if kind is not None:
            found = kind, parent
    return found


def input_path(spec: str | os.PathLike[str] | None) -> Path | None:
    """The existing file or directory an input argument names (``PATH`` or
    ``FORMAT:PATH``); None when it names none (a model alias, a missing path)."""
    if spec is None:
        return None
    text = os.fspath(spec)
    if not text:
        return None
    if Path(text).exists():
        return Path(text)
    _, sep, rest = text.partition(":")
    return Path(rest) if sep and rest and Path(rest).exists() else None


def _same(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: one resolved path, or one inode (a hard link)."""
    if _resolved(a) == resolved(b) or resolved(a) == resolved(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inputs(inputs: Iterable[str | os.PathLike[str] | None]) -> list[Path]:
    found = (input_path(i) for i in inputs)
    return [p for p in found if p is not None]


def refuse_link(target: Path, what: str) -> None:
    """Refuse a ``target`` that is a symbolic link (its last component; links above it
    are the user's layout): a writer that writes into it would write wherever it points
    (``/etc``, another model), and one that swaps it whole would drop the link for a
    directory and leave what it pointed to as it was; neither is what was asked."""
    if target.is_symlink():
        try:
            to = f" (to {os.readlink(target)})"
        except OSError:
            to = ""
        raise AnygrainError(
            f"{target}: is a symbolic link{to}; refusing to write {what} through it. "
            "Give the directory it points to, or a new path"
        )


def listed_entries(directory: Path) -> list[str]:
    """The names in ``directory`` (sorted) but anygrain's temporary names and
    operating-system litter: what makes a directory not empty to a writer."""
    return sorted(
        e.name
        for e in directory.iterdir()
        if not is_temporary_name(e.name) and e.name not in _OS_LITTER
    )


def refuse_inside_artefact(target: Path, what: str) -> None:
    """Refuse ``target`` when an anygrain index, model or corpus directory holds it."""
    found = enclosing_artefact(target)
    if found is not None:
        kind, directory = found
        raise AnygrainError(
            f"{target}: lies inside {_WHAT[kind]} {directory}; writing {what} there would "
            "change what it holds. Give a path outside it"
        )


def check_output_file(
    target: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    *,
    what: str = "the output",
) -> Path:
    """Refuse, before anything is read or written, a file target that would destroy data.

    ``inputs`` are what the same command reads (paths or ``FORMAT:PATH``; ones naming no
    existing path are ignored).  Refused: a target that is an input (same path or same
    inode); a target inside an input directory that already exists there (it may be one
    of the files read); a target inside an anygrain index, saved model or corpus
    directory.  Returns the target as a Path."""
    t = Path(target)
    refuse_link(t, what)
    refuse_inside_artefact(t, what)
    for inp in _inputs(inputs):
        if _same(t, inp):
            raise AnygrainError(
                f"{t}: is the input {inp}; writing {what} there would replace it. Give another path"
            )
        if inp.is_dir() and _resolved(t).is_relative_to(resolved(inp)) and t.exists():
            raise AnygrainError(
                f"{t}: already exists inside the input directory {inp} and may be one of the "
                f"files this command reads; give a new path for {what}"
            )
    return t


def check_output_dir(
    target: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    *,
    what: str = "the output",
    may_be: Iterable[str] = (),
    replaces: bool = False,
) -> Path:
    """Refuse, before anything is read or written, a directory target that would destroy
    data: an existing file; an anygrain artefact of a kind not in ``may_be`` (``"model"``:
    the model a training run writes may be there already); an input, or (``replaces``: the
    directory is swapped whole) one that contains an input; one inside an anygrain index,
    saved model or corpus directory; a symbolic link (:func:`refuse_link`).  Returns the
    target as a Path."""
    t = Path(target)
    refuse_link(t, what)
    for inp in _inputs(inputs):
        if _same(t, inp):
            raise AnygrainError(
                f"{t}: is the input {inp}; writing {what} there would replace it. "
                "Give another directory"
            )
        if replaces and resolved(inp).is_relative_to(resolved(t)):
            raise AnygrainError(
                f"{t}: contains the input {inp}; writing {what} there would destroy it. "
                "Give another directory"
            )
    if t.exists() and not t.is_dir():
        raise AnygrainError(f"{t}: exists and is not a directory; refusing to replace it")
    kind = artefact_kind(t)
    if kind is not None and kind not in set(may_be):
        raise AnygrainError(f"{t}: is {_AN[kind]}, not a place for {what}; give another directory")
    refuse_inside_artefact(t, what)
    return t


def unowned_files(directory: str | os.PathLike[str], owned: Iterable[str]) -> list[str]:
    """Files under ``directory`` (relative, ``/``-separated, sorted) that are not in
    ``owned``, leaving out the index manifest, anygrain's own temporary names and
    operating-system litter: what replacing the directory whole would lose."""
    root = Path(directory)
    keep = set(owned) | {INDEX_MANIFEST}
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not is_temporary_name(d))
        for name in sorted(filenames):
            if is_temporary_name(name) or name in _OS_LITTER:
                continue
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if rel not in keep:
                found.append(rel)
    return found


def name_some(items: list[str], n: int = 3) -> str:
    """The first ``n`` of ``items`` and how many more, for a one-line message."""
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return ", ".join(items[:n]) + more
