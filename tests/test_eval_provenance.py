"""Every eval report (and every run file) records what produced it (issue 34)."""

from __future__ import annotations

import json
from pathlib import Path

from anygrain import Index
from anygrain.api import evaluate_index


def test_reports_and_runs_name_their_index_settings_and_options(
    squad_file: Path, tmp_path: Path
) -> None:
    idx = Index.build(f"squad:{squad_file}", kind="bm25", out=tmp_path / "bm25", progress=False)
    qs = f"squad:{squad_file}"
    a = evaluate_index(idx, qs, progress=False, run_out=tmp_path / "run.trec")
    b = evaluate_index(idx, qs, progress=False, metrics=["top@1"], k=3)
    pa, pb = a.extra["provenance"], b.extra["provenance"]
    assert pa["index"]["kind"] == "bm25" and pa["index"]["corpus_checksum"]
    assert pa["index"]["build_settings"] == idx.manifest["settings"]["build"]
    assert pa["questions"] == pb["questions"] and pa["anygrain"]
    assert pa["scope"] == "corpus"
    json.dumps(a.to_dict(), allow_nan=False)  # the JSON `anygrain eval --json` prints
    side = json.loads((tmp_path / "run.trec.provenance.json").read_text())
    assert side == pa
