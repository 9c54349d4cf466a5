"""Issue 34, classes 4, 5 and 8: numbers that must be finite, options that do not apply,
messages printed as they are.

Each typed setting declares its range once (:class:`anygrain.utils.ranges.Range`) and
every entry is checked against it: the command line, the Python API, a search's override
and ``index.json`` read back on open.  Options that would be recorded or passed over
without effect are refused.  Each refusal is one line, and nothing is written.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from reliability34_helpers import jsonl, one_line_error, tree
from typer.testing import CliRunner

from anygrain import api
from anygrain.composite.fusion import FusionConfig
from anygrain.errors import AnygrainError
from anygrain.index.base import Index
from anygrain.phrase.lexical import SparseFusion
from anygrain.sparse.bm25 import Bm25Settings
from anygrain.utils.ranges import Range

pytestmark = pytest.mark.usefixtures("torch_one_thread")

DOCS = [(f"d{i}", f"document {i} about apples and pears") for i in range(6)]


@pytest.fixture(scope="module")
def built(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("built")
    jsonl(root / "docs.jsonl", DOCS)
    Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)
    Index.build(
        f"squad:{squad}", kind="phrase", out=root / "p", model=str(model_dir), progress=False
    )
    return root


@pytest.fixture
def work(built: Path, tmp_path: Path) -> Path:
    for name in ("docs.jsonl", "bm25", "p"):
        (shutil.copytree if (built / name).is_dir() else shutil.copy)(built / name, tmp_path / name)
    return tmp_path


def _index(*extra: str) -> list[str]:
    return ["index", "{root}/docs.jsonl", "--out", "{root}/new", "-q", *extra]


def _phrase(*extra: str) -> list[str]:
    return _index("--kind", "phrase", "--model", "{model}", *extra)


CLI_CASES: list[tuple[str, list[str], str]] = [
    (
        "k1 nan",
        _index("--bm25-k1", "nan"),
        "BM25 k1 must be a finite number from 0 to 1000, got nan",
    ),
    (
        "k1 inf",
        _index("--bm25-k1", "inf"),
        "BM25 k1 must be a finite number from 0 to 1000, got inf",
    ),
    ("k1 1e308", _index("--bm25-k1", "1e308"), "BM25 k1 must be a finite number from 0 to 1000"),
    ("k1 negative", _index("--bm25-k1", "-1"), "BM25 k1 must be a finite number from 0 to 1000"),
    ("b nan", _index("--bm25-b", "nan"), "BM25 b must be a finite number from 0 to 1, got nan"),
    ("b 2", _index("--bm25-b", "2"), "BM25 b must be a finite number from 0 to 1, got 2"),
    (
        "hybrid k1 nan",
        _index("--kind", "hybrid", "--bm25-k1", "nan"),
        "BM25 k1 must be a finite number",
    ),
    (
        "hybrid fusion weight 1e308",
        _index("--kind", "hybrid", "--fusion-weight", "1e308"),
        "fusion weight must be a finite number from 0 to 1000",
    ),
    (
        "hybrid fusion weight nan",
        _index("--kind", "hybrid", "--fusion-weight", "nan"),
        "fusion weight must be a finite number from 0 to 1000, got nan",
    ),
    (
        "sparse weight 1e308",
        _phrase("--sparse-weight", "1e308"),
        "sparse weight must be a finite number from 0 to 1000, got 1e+308",
    ),
    ("sparse weight nan", _phrase("--sparse-weight", "nan"), "sparse weight must be a finite"),
    ("sparse weight -1", _phrase("--sparse-weight", "-1"), "sparse weight must be a finite"),
    ("threshold nan", _phrase("--threshold", "nan"), "phrase filter threshold must be a finite"),
    ("threshold inf", _phrase("--threshold", "-inf"), "phrase filter threshold must be a finite"),
    (
        "no-sparse with a weight",
        _phrase("--no-sparse", "--sparse-weight", "2"),
        "--sparse-weight) needs the lexical part on",
    ),
    (
        "hybrid --from with --bm25-b",
        ["index", "--kind", "hybrid", "--from", "{root}/bm25", "--from", "{root}/p"]
        + ["--out", "{root}/new", "--bm25-b", "0.9"],
        "--bm25-b: applies when building from a corpus; --kind hybrid --from combines",
    ),
    (
        "hybrid --from with k1 and --sparse-weight",
        ["index", "--kind", "hybrid", "--from", "{root}/bm25", "--from", "{root}/p"]
        + ["--out", "{root}/new", "--bm25-k1", "2", "--sparse-weight", "1"],
        "--bm25-k1, --sparse-weight: apply when building",
    ),
    (
        "search sparse weight 1e308",
        ["search", "{root}/p", "Who created Python?", "--sparse-weight", "1e308", "--json"],
        "sparse weight must be a finite number from 0 to 1000, got 1e+308",
    ),
    (
        "search sparse weight nan",
        ["search", "{root}/p", "Who created Python?", "--sparse-weight", "nan"],
        "sparse weight must be a finite number from 0 to 1000, got nan",
    ),
    (
        "attach-sparse weight inf",
        ["attach-sparse", "{root}/p", "--sparse-weight", "inf"],
        "sparse weight must be a finite number from 0 to 1000, got inf",
    ),
    (
        "device cuda:abc printed as given",
        [
            "index",
            "{root}/docs.jsonl",
            "--kind",
            "dense",
            "--device",
            "cuda:abc",
            "--out",
            "{root}/new",
        ],
        "cuda:abc",
    ),
    (
        "questions: a directory",
        ["search", "{root}/bm25", "--questions", "{root}"],
        "is a directory",
    ),
    (
        "questions: FORMAT:a directory",
        ["search", "{root}/bm25", "--questions", "squad:{root}"],
        "is a directory; this format reads one file",
    ),
]


@pytest.mark.parametrize(("name", "args", "says"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_in_one_line_and_writes_nothing(
    name: str, args: list[str], says: str, work: Path, model_dir: Path
) -> None:
    from anygrain.cli.main import app

    argv = [a.format(root=work, model=model_dir) for a in args]
    before = tree(work)
    line = one_line_error(CliRunner().invoke(app, argv))
    assert says in line, line
    assert "🔤" not in line
    assert tree(work) == before


API_CASES: list[tuple[str, Any, str]] = [
    ("Bm25Settings k1 nan", lambda: Bm25Settings(k1=math.nan), "BM25 k1"),
    ("Bm25Settings k1 a string", lambda: Bm25Settings(k1="1.2"), "got '1.2'"),  # type: ignore[arg-type]
    ("Bm25Settings b bool", lambda: Bm25Settings(b=True), "got True"),
    ("SparseFusion 1e308", lambda: SparseFusion(weight=1e308), "sparse weight"),
    ("SparseFusion override inf", lambda: SparseFusion().with_weight(math.inf), "sparse weight"),
    ("SparseFusion depth 0", lambda: SparseFusion(norm_depth=0), "norm_depth"),
    ("FusionConfig weight nan", lambda: FusionConfig(weight=math.nan), "fusion weight"),
    ("FusionConfig depth 1.5", lambda: FusionConfig(depth=1.5), "fusion depth"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("name", "make", "says"), API_CASES, ids=[c[0] for c in API_CASES])
def test_the_api_checks_the_same_ranges(name: str, make: Any, says: str) -> None:
    with pytest.raises(AnygrainError, match=says.replace("(", r"\(")):
        make()


def test_api_build_refuses_before_writing(work: Path) -> None:
    before = tree(work)
    with pytest.raises(AnygrainError, match="BM25 k1 must be"):
        api.build_index(str(work / "docs.jsonl"), kind="bm25", out=work / "new", k1=math.inf)
    with pytest.raises(AnygrainError, match="sparse weight must be"):
        Index.build(str(work / "docs.jsonl"), kind="phrase", out=work / "new", sparse_weight=1e300)
    assert tree(work) == before


# index.json edited by hand (or written by a bug): refused on open, naming the file
LOAD_CASES: list[tuple[str, str, list[str], Any, str]] = [
    ("bm25 k1 nan", "bm25", ["settings", "build", "k1"], math.nan, "settings.build: BM25 k1"),
    ("bm25 b 5", "bm25", ["settings", "build", "b"], 5, "settings.build: BM25 b"),
    ("phrase weight 1e308", "p", ["settings", "sparse", "weight"], 1e308, "sparse weight"),
    ("phrase weight inf", "p", ["settings", "sparse", "weight"], math.inf, "sparse weight"),
]


@pytest.mark.parametrize(
    ("name", "index", "key", "value", "says"), LOAD_CASES, ids=[c[0] for c in LOAD_CASES]
)
def test_index_json_out_of_range_is_refused_on_open(
    name: str, index: str, key: list[str], value: Any, says: str, work: Path
) -> None:
    f = work / index / "index.json"
    m = json.loads(f.read_text())
    d = m
    for k in key[:-1]:
        d = d[k]
    d[key[-1]] = value
    f.write_text(json.dumps(m))  # json writes NaN and Infinity, as a bug would
    with pytest.raises(AnygrainError, match=says) as e:
        Index.load(work / index)
    assert str(f) in str(e.value)


def test_range_bounds_are_inclusive_and_typed() -> None:
    r = Range("x", 0.0, 1.0)
    assert r.check(0) == 0.0 and r.check(1.0) == 1.0
    assert Range("n", 1, 5, integer=True).check(5.0) == 5
    with pytest.raises(AnygrainError, match="x must be a finite number above 0 to 1, got 0"):
        Range("x", 0.0, 1.0, low_open=True).check(0)
