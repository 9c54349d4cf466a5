"""What of a phrase model besides its weights changes a phrase index's scores, recorded with
its model reference and checked with it.

The fingerprint covers the weights that make phrase vectors.  Two models with those weights
can still score on different scales or make other phrases: question pooling and prefix
change the question vectors, the passage prefix, titles, window length and stride the
phrase vectors (and what an exact re-scoring re-encodes).  A build records them in
``index.json`` (``model.scoring``); the window settings were recorded in ``settings``
before, so an index without ``model.scoring`` is checked on those.  A model stating other
values is refused in one line naming the file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anygrain.errors import IndexMismatchError

#: ``PhraseConfig`` fields recorded under ``model.scoring`` in ``index.json``
SCORING_FIELDS = (
    "question_pooling",
    "query_prefix",
    "passage_prefix",
    "include_title",
    "max_passage_length",
    "doc_stride",
)
#: recorded in ``settings`` since phrase indexes have been (older indexes have no scoring)
SETTINGS_FIELDS = ("include_title", "max_passage_length", "doc_stride")


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # an enum as its saved value


def scoring_record(config: Any) -> dict[str, Any]:
    """The scoring settings of a phrase model's config, as ``index.json`` records them."""
    return {f: _plain(getattr(config, f)) for f in SCORING_FIELDS if hasattr(config, f)}


def check_scoring(path: Path, manifest: dict[str, Any], config: Any, label: str) -> None:
    """Refuse a phrase model (``config``, called ``label``) whose scoring settings differ
    from those the index at ``path`` recorded."""
    recorded: list[tuple[str, str, Any]] = []
    scoring = (manifest.get("model") or {}).get("scoring")
    if isinstance(scoring, dict):
        recorded += [(f"model.scoring.{k}", k, v) for k, v in scoring.items()]
    else:
        settings = manifest.get("settings") or {}
        recorded += [(f"settings.{k}", k, settings[k]) for k in SETTINGS_FIELDS if k in settings]
    for where, name, want in recorded:
        if not hasattr(config, name):
            continue
        have = _plain(getattr(config, name))
        if have != want:
            raise IndexMismatchError(
                f"{path}: the phrase model {label} has {name}={have!r}, but this index was "
                f"built with {name}={want!r} (index.json, field {where}): its scores would be "
                "on another scale or over other phrases. Pass the model the index was built "
                "with, or rebuild the index with this one."
            )
