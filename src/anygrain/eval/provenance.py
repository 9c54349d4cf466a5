"""What produced an evaluation: recorded in every eval report and beside every run file.

Two evaluations that differ in one setting (a ``--sparse-weight 0`` run and a default one,
two compressions, another unit or scope) must be told apart from their files alone, so each
report carries the anygrain version, the index (kind, format, model reference and
fingerprint, corpus checksum, build settings), the unit and scope, the search options and the
questions; a TREC run file gets the same record as ``RUN.provenance.json`` beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from anygrain.utils.atomic import atomic_write_text

SUFFIX = ".provenance.json"


def installed_version() -> str:
    """This anygrain's version, as installed (the package metadata: eval sits below the
    package's ``__init__`` and does not import it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("anygrain")
    except PackageNotFoundError:
        return "unknown"


def _plain(value: Any) -> Any:
    """JSON-ready: enums by value, other objects by their text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return getattr(value, "value", str(value))


def provenance(
    index: Any,
    *,
    unit: Any,
    scope: Any,
    search_options: Mapping[str, Any] | None,
    questions: str | None,
    limit: int | None,
) -> dict[str, Any]:
    summary = index.summary()
    build = (index.manifest.get("settings") or {}).get("build")
    return _plain(
        {
            "anygrain": installed_version(),
            "index": {
                "path": summary.get("path"),
                "kind": summary.get("kind"),
                "format": summary.get("format"),
                "format_version": summary.get("format_version"),
                "model": summary.get("model"),
                "corpus_checksum": (summary.get("corpus") or {}).get("checksum"),
                "build_settings": build,
            },
            "unit": unit,
            "scope": scope,
            "search_options": dict(search_options or {}),
            "questions": questions,
            "limit": limit,
        }
    )


def scope_note(scope: Any, search_options: Mapping[str, Any] | None) -> str:
    """What a report says of search options that cannot change it in ``scope`` ("" none):
    inside one gold passage the BM25 term of a phrase score is the same for every phrase,
    so a sparse weight moves every score alike and no ranking."""
    weight = (search_options or {}).get("sparse_weight")
    if _plain(scope) != "gold-passage" or weight is None:
        return ""
    return (
        f"--sparse-weight {weight:g} changes nothing with --scope gold-passage: the BM25 term "
        "is the same for every phrase of one passage, so the ranking inside the gold passage "
        "is the dense one whatever the weight"
    )


def write_run_provenance(run_path: str | os.PathLike[str], record: Mapping[str, Any]) -> str:
    """``RUN.provenance.json`` beside the run file (written atomically); its path."""
    path = os.fspath(run_path) + SUFFIX
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False))
    return path


def annotate_report(
    report: Any,
    index: Any,
    *,
    errors: Any,
    unit: Any,
    scope: Any,
    search_options: Mapping[str, Any] | None,
    questions: str | None,
    limit: int | None,
    run_out: str | os.PathLike[str] | None,
) -> Any:
    """The report's counts of skipped and noted records, its scope and unit, and its
    provenance (also written beside ``run_out``)."""
    report.n_skipped_records = errors.n_skipped
    if errors.noted:  # records kept despite an irregularity, counted by the reader
        report.extra["noted_records"] = dict(errors.noted)
    report.extra["scope"] = _plain(scope)
    note = scope_note(scope, search_options)
    if note:
        report.extra["notes"] = [note]
    if index.cuts_units():
        report.extra["unit"] = _plain(unit)
    record = provenance(
        index,
        unit=unit,
        scope=scope,
        search_options=search_options,
        questions=questions,
        limit=limit,
    )
    report.extra["provenance"] = record
    if run_out is not None:
        write_run_provenance(run_out, record)
    return report
