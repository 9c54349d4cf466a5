"""An index's on-disk manifest, ``index.json``, and the checks of the files it lists.

Every index is a directory with ``index.json`` naming its kind, format version, the
corpus checksum and model fingerprint it was built with, its settings, and the size and
checksum of every other file in the directory (``files``; see
:mod:`anygrain.utils.checksums`).  Opening an index checks those files
(:func:`check_on_open`), its model weights hashed whatever their size, once per process
per version of a file.  A build refuses, before anything is written, an output directory
that holds anything but an index (or an index, unless ``overwrite``; and with it, an
index holding files its manifest does not list), one that overlaps the source, and one
inside another index, model or corpus directory (:func:`check_build_target`; see
:mod:`anygrain.utils.targets`, the check every writer makes).

Indexes written before checksums were recorded still open, with a warning that their
files cannot be checked; rebuilding one records them.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError
from anygrain.index.registry import IndexKind, registered_class
from anygrain.utils.atomic import atomic_write_text
from anygrain.utils.checksums import (
    ALGORITHM,
    SMALL_LIMIT,
    Problem,
    Verify,
    check_files,
    file_table,
)
from anygrain.utils.targets import (
    MODEL_CONFIG_FILES,
    name_some,
    refuse_inside_artefact,
    refuse_link,
    resolved,
    unowned_files,
)

MANIFEST = "index.json"
FORMAT = "anygrain.index"


class UncheckedIndexWarning(UserWarning):
    """An index from before checksums were recorded: its files cannot be checked."""


def read_manifest(path: Path) -> dict[str, Any]:
    f = Path(path) / MANIFEST
    if not f.exists():
        raise AnygrainError(f"{path}: not an anygrain index (no {MANIFEST})")
    try:
        m = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise AnygrainError(f"{f}: corrupt manifest ({e.msg}, line {e.lineno})") from None
    except UnicodeDecodeError:
        raise AnygrainError(f"{f}: corrupt manifest (not UTF-8 text)") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise AnygrainError(f"{f}: not an anygrain index manifest")
    for key in ("files", "corpus_files"):
        if key in m and not isinstance(m[key], dict):
            raise AnygrainError(f"{f}: corrupt manifest ('{key}' is not an object)")
    return m


def write_manifest(path: Path, kind: IndexKind, version: int, **fields: Any) -> dict[str, Any]:
    """Write ``index.json`` last, with the checksum of every other file under ``path``
    (and of the corpus files when the corpus lives outside it)."""
    path = Path(path)
    m = {
        "format": FORMAT,
        "kind": kind.value,
        "format_version": version,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **fields,
        "checksum_algorithm": ALGORITHM,
        "files": file_table(path, exclude=[MANIFEST]),
    }
    corpus = external_corpus(path, m)
    if corpus is not None:
        m["corpus_files"] = file_table(corpus)
    atomic_write_text(path / MANIFEST, json.dumps(m, indent=2, ensure_ascii=False))
    return m


# manifest fields write_manifest sets itself
_MANAGED = ("format", "kind", "format_version", "created", "checksum_algorithm", "files")


def rewrite_manifest(path: Path, old: dict[str, Any], **updates: Any) -> dict[str, Any]:
    """``index.json`` of ``old`` with ``updates`` (a None value drops the field), checksums
    recomputed over the files now under ``path``."""
    fields = {k: v for k, v in old.items() if k not in _MANAGED and k != "corpus_files"}
    fields.update(updates)
    fields = {k: v for k, v in fields.items() if v is not None}
    return write_manifest(path, IndexKind(old["kind"]), int(old["format_version"]), **fields)


def external_corpus(path: Path, manifest: dict[str, Any]) -> Path | None:
    """The corpus directory when it is not inside the index directory (its files are not in
    ``files`` then, so they are checked separately)."""
    ref = (manifest.get("corpus") or {}).get("path")
    if not isinstance(ref, str):
        return None
    c = Path(ref) if Path(ref).is_absolute() else path / ref
    c, root = c.resolve(), path.resolve()
    return None if c.is_relative_to(root) else c


def model_files(files: dict[str, Any]) -> set[str]:
    """The entries of a manifest's ``files`` that belong to a saved model inside the index
    (every file under a directory holding a model config): the weights every query goes
    through, hashed on open whatever their size (:func:`anygrain.utils.checksums.check_files`)."""
    dirs = {rel.rpartition("/")[0] for rel in files if rel.rpartition("/")[2] in MODEL_CONFIG_FILES}
    return {rel for rel in files if any(d == "" or rel.startswith(d + "/") for d in dirs)}


def check_index_files(
    path: str | Path,
    manifest: dict[str, Any] | None = None,
    *,
    verify: Verify | str = Verify.FULL,
    small_limit: int = SMALL_LIMIT,
    extra: bool = False,
) -> list[Problem]:
    """Files of the index at ``path`` (its outside corpus, and the parts it opens from
    outside it: :meth:`~anygrain.index.base.Index.part_dirs`) that differ from what its manifest recorded;
    ``extra`` also reports files the build did not write.  Raises when the manifest
    recorded no checksums."""
    p = Path(path)
    m = manifest if manifest is not None else read_manifest(p)
    if "files" not in m:
        raise AnygrainError(
            f"{p}: built by an older anygrain that recorded no checksums; rebuild it to check it"
        )
    v = Verify(verify)
    problems: list[Problem] = []
    for root, rm in [(p, m), *_parts_outside(p, m)]:
        problems += check_files(
            root,
            rm["files"],
            verify=v,
            small_limit=small_limit,
            extra=extra,
            exclude=[MANIFEST],
            always=model_files(rm["files"]),
        )
        corpus = external_corpus(root, rm)
        if corpus is not None and "corpus_files" in rm:
            problems += check_files(
                corpus, rm["corpus_files"], verify=v, small_limit=small_limit, extra=extra
            )
    return problems


def _parts_outside(path: Path, manifest: dict[str, Any]) -> list[tuple[Path, dict[str, Any]]]:
    """``(directory, manifest)`` of each part index that the index at ``path`` opens from
    outside it (a combined hybrid index's, a shard moved elsewhere): its files are not in
    the index's own table, so they are checked beside it, at the same depth.  A part that
    recorded no checksums is passed over with a warning, as on open."""
    try:
        cls = registered_class(IndexKind(manifest.get("kind")))
        dirs = cls.part_dirs(path, manifest) if cls is not None else []
    except (ValueError, KeyError, TypeError, AttributeError):
        return []  # a broken manifest: opening the index reports it
    root, out = path.resolve(), []
    for d in dirs:
        if d.resolve().is_relative_to(root):
            continue  # nested: its files are in the index's own table
        m = read_manifest(d)
        if "files" in m:
            out.append((d, m))
        else:
            _warn_unchecked(d)
    return out


def check_build_target(source: Any, out: str | Path, *, overwrite: bool = False) -> None:
    """Refuse, before anything is written, an ``out`` whose replacement would lose data.

    ``out`` may be missing, an empty directory, or (with ``overwrite``) an anygrain
    index holding only the files its manifest lists.  Anything else it holds (user
    files, a corpus, a regular file, files put inside an index) is refused, and so is
    an ``out`` that is, contains or lies inside the source, or lies inside another
    index, model or corpus directory (:func:`anygrain.utils.targets.enclosing_artefact`).
    """
    o = Path(out)
    src = _source_path(source)
    if src is not None:
        s, r = resolved(src), resolved(o)
        if s == r or s.is_relative_to(r):
            where = "is" if s == r else "contains"
            raise AnygrainError(
                f"{o}: the output directory {where} the source {src}; writing the index there "
                "would destroy it. Give another --out"
            )
        if r.is_relative_to(s):
            raise AnygrainError(
                f"{o}: the output directory lies inside the source {src}; give an --out outside it"
            )
    refuse_link(o, "an index")  # as every writer's target check does
    refuse_inside_artefact(o, "an index")  # the walk every writer's target check makes
    if not o.exists() and not o.is_symlink():
        return
    if not o.is_dir():
        raise AnygrainError(f"{o}: exists and is not a directory; refusing to replace it")
    if not any(o.iterdir()):
        return
    try:
        m = read_manifest(o)
    except AnygrainError:
        m = None
    if m is None:
        raise AnygrainError(
            f"{o}: not empty and not an anygrain index; refusing to replace what it holds "
            "(give a new or empty directory)"
        )
    if not overwrite:
        raise AnygrainError(
            f"{o}: already holds an anygrain index; pass --overwrite (overwrite=True) to replace it"
        )
    # --overwrite replaces the index's own files (its manifest lists them), never a user's;
    # an index from before the table was recorded cannot tell them apart
    unknown = unowned_files(o, m["files"]) if "files" in m else []
    if unknown:
        raise AnygrainError(
            f"{o}: holds files the index did not write ({name_some(unknown)}); --overwrite "
            "replaces only an index's own files: move them out, or give another --out"
        )


def _source_path(source: Any) -> Path | None:
    """The file or directory a source reads from, when it names one."""
    from anygrain.corpus.formats import Source
    from anygrain.corpus.store import CorpusStore

    if isinstance(source, CorpusStore | Source):
        return source.path
    if not isinstance(source, str | os.PathLike):
        return None
    text = os.fspath(source)
    if Path(text).exists():
        return Path(text)
    _, sep, rest = text.partition(":")  # FORMAT:PATH
    return Path(rest) if sep and rest else None


def _warn_unchecked(path: Path) -> None:
    warnings.warn(
        f"{path}: built by an older anygrain that recorded no checksums, so damaged files "
        "cannot be detected; rebuild the index to record them",
        UncheckedIndexWarning,
        stacklevel=4,
    )


def check_on_open(
    path: Path, manifest: dict[str, Any], verify: Verify | str, small_limit: int
) -> None:
    """Refuse to open the index at ``path`` when a file differs from ``manifest`` (checked
    to the depth ``verify``); warn, and open, where it recorded no checksums."""
    if "files" not in manifest:
        _warn_unchecked(path)
        return
    problems = check_index_files(path, manifest, verify=verify, small_limit=small_limit)
    if problems:
        more = f" and {len(problems) - 1} more file(s)" if len(problems) > 1 else ""
        raise AnygrainError(
            f"{problems[0]}{more}; the index is damaged: rebuild it "
            f"(`anygrain verify {path}` lists every bad file)"
        )
