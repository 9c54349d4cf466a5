"""The base install has no torch and no transformers: the CLI starts, a phrase index with the
shipped ``phrase-minilm`` is built and searched, and the shipped ``reader-minilm`` reads (the
answer grain), in a child process where importing either raises ImportError (a meta-path
finder installed before anything else is imported), with an empty graph cache, so the
shipped graphs are rebuilt with NumPy there; the index is the one torch builds.

What needs torch (training, packing, bf16, a GPU, ``--runtime torch``, a dense model, a model
that ships no graph) says so in one line naming the extra, and the demo runs twice (the second
reusing its index).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

# the child's first lines: torch and transformers cannot be imported, as on a base install
PRELUDE = """
import sys

class NoTorch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(f"No module named {name!r} (this test's base install)")
        return None

sys.meta_path.insert(0, NoTorch())
"""

CLI = (
    PRELUDE
    + """
from anygrain.cli.main import main
sys.argv = ["anygrain", *sys.argv[1:]]
try:
    code = main()
finally:
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
    assert not loaded, loaded
sys.exit(code)
"""
)

CORPUS = """The Denver Broncos represented the AFC at Super Bowl 50. They defeated the Carolina \
Panthers 24 to 10 at Levi's Stadium in Santa Clara, California.

The break statement in Python exits the nearest enclosing for or while loop. The continue \
statement skips to the next iteration of the loop.

Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. \
She was the first woman to win a Nobel Prize.
"""


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(cache)  # an empty graph cache: shipped graphs are rebuilt
    env["OMP_NUM_THREADS"] = "1"
    env["COLUMNS"] = "200"
    return env


def anygrain_without_torch(
    cache: Path, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_the_prelude_refuses_torch(tmp_path: Path) -> None:
    code = PRELUDE + "\ntry:\n    import torch\nexcept ImportError as e:\n    print(e)\n"
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True
    )
    assert "this test's base install" in done.stdout, done.stderr


def test_help_without_torch(tmp_path: Path) -> None:
    done = anygrain_without_torch(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "search" in done.stdout and "index" in done.stdout


def _kinds(cache: Path) -> list[str]:
    """The graphs in a graph cache, by kind (and its files table)."""
    return sorted(p.name.rsplit("-", 1)[0] for p in (cache / "anygrain" / "onnx").iterdir())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(index, graph cache)``: a phrase index over a small corpus with the shipped
    phrase-minilm (the default), built without torch from an empty graph cache."""
    d = tmp_path_factory.mktemp("torch-free")
    (d / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    cache = d / "cache"
    done = anygrain_without_torch(
        cache, "index", str(d / "corpus.txt"), "--out", str(d / "idx"), "--kind", "phrase", "-q",
        "--no-int8",  # float32, as the torch build it is compared with
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "with model phrase-minilm" in done.stdout
    # the passage and question graphs rebuilt with NumPy from their shipped forms
    assert _kinds(cache) == ["files", "phrase-passage", "phrase-question"]
    return d / "idx", cache


def test_phrase_search_and_reading_without_torch(built: tuple[Path, Path]) -> None:
    index, cache = built
    q = "Who was the first woman to win a Nobel Prize?"
    done = anygrain_without_torch(cache, "search", str(index), q, "--unit", "phrase")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Marie Curie" in done.stdout

    q = "Which team represented the AFC at Super Bowl 50?"
    done = anygrain_without_torch(cache, "search", str(index), q, "--unit", "answer", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(done.stdout.splitlines()[0])  # one JSON object a hit, best first
    assert first["unit"] == "answer" and first["answer"] == "Denver Broncos", first
    assert _kinds(cache) == ["files", "phrase-passage", "phrase-question", "reader"]


def test_the_torch_free_build_is_the_torch_build(
    built: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built with the torch model (its passages on torch), the index keeps the same phrases,
    and a search finds the same hits with the same scores (to 1e-4)."""
    pytest.importorskip("torch")
    from anygrain import api
    from anygrain.utils import precision

    # float32 passages, as the graph encodes them: auto (recorded as asked) is bf16 on a
    # CPU with it natively
    monkeypatch.setattr(precision, "native_bf16", lambda: False)

    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    api.build_index(
        tmp_path / "corpus.txt",
        kind="phrase",
        out=tmp_path / "idx",
        runtime="torch",
        int8=False,  # asked as the torch-free build is (recorded in settings.build)
        progress=False,
    )
    index, _ = built
    a = json.loads((index / "index.json").read_text())
    b = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert a["model"] == b["model"] and a["settings"] == b["settings"]
    for name in ("tokens.npy", "start_ids.npy", "end_ids.npy", "passage_ptr.npy", "filter.npy"):
        x, y = np.load(index / "phrase" / name), np.load(tmp_path / "idx" / "phrase" / name)
        np.testing.assert_allclose(x.astype(np.float64), y, atol=1e-3, rtol=0, err_msg=name)
    q = ["Who was the first woman to win a Nobel Prize?", "What exits a loop?"]
    torch_hits = api.search_index(tmp_path / "idx", q, 5, unit="phrase", runtime="torch")
    free_hits = api.search_index(index, q, 5, unit="phrase", runtime="onnx")
    for hs, gs in zip(torch_hits, free_hits, strict=True):
        assert [h.text for h in hs] == [g.text for g in gs]
        np.testing.assert_allclose([h.score for h in hs], [g.score for g in gs], atol=1e-4)


def test_a_model_that_needs_torch_says_how_to_get_it(tmp_path: Path) -> None:
    """A reader with no shipped or cached graph needs torch to export one: one line saying
    which extra installs it."""
    import shutil

    from anygrain.models.shipped import SHIPPED

    d = tmp_path / "reader"
    shutil.copytree(SHIPPED["reader-minilm"].path, d, ignore=shutil.ignore_patterns("graphs"))
    code = PRELUDE + (
        "from anygrain.errors import AnygrainError\n"
        "from anygrain.reader.onnx import load_reader\n"
        "try:\n"
        f"    load_reader({str(d)!r}, 'onnx')\n"
        "except AnygrainError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path / "cache"), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip()
    assert "\n" not in line and line.endswith("pip install 'anygrain[train]'"), line


def test_config_file_names_agree() -> None:
    pytest.importorskip("torch")
    from anygrain.phrase import config, graph_model, model

    assert config.MODEL_CONFIG == graph_model.MODEL_CONFIG == model.MODEL_CONFIG


def test_add_without_torch(built: tuple[Path, Path], tmp_path: Path) -> None:
    """Adding documents encodes them on the shipped passage graph too."""
    import shutil

    index, cache = built
    copy = tmp_path / "idx"
    shutil.copytree(index, copy)
    more = tmp_path / "more.txt"
    more.write_text("Rosalind Franklin took the X-ray image of DNA known as Photo 51.\n")
    done = anygrain_without_torch(cache, "add", str(copy), str(more), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    done = anygrain_without_torch(cache, "search", str(copy), "Who took Photo 51?")
    assert done.returncode == 0 and "Rosalind Franklin" in done.stdout, done.stderr[-3000:]


def test_add_to_a_bf16_index_without_torch(built: tuple[Path, Path], tmp_path: Path) -> None:
    """An index built in bfloat16 (torch, on a CPU with it natively) takes documents added
    where torch is missing: the passage graph encodes them in float32, one line says so,
    and ``settings.adds`` records it; the index's own ``bf16`` is unchanged."""
    pytest.importorskip("torch")
    from anygrain import api

    _, cache = built
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    index = tmp_path / "idx"
    api.build_index(tmp_path / "corpus.txt", kind="phrase", out=index, bf16=True, progress=False)
    more = tmp_path / "more.txt"
    more.write_text("Rosalind Franklin took the X-ray image of DNA known as Photo 51.\n")
    done = anygrain_without_torch(cache, "add", str(index), str(more), "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    from anygrain.utils.precision import auto_int8

    # an add resolves int8 as a build does (auto_int8)
    said = [ln for ln in done.stderr.splitlines() if ("int8" if auto_int8() else "float32") in ln]
    assert len(said) == 1 and "bfloat16" in said[0] and "torch is not installed" in said[0], (
        done.stderr
    )
    settings = json.loads((index / "index.json").read_text())["settings"]
    assert settings["bf16"] is True
    assert settings["adds"] == [{"passages": 1, "bf16": False, "int8": auto_int8()}]
    # re-scoring re-encodes passages on the graph too (float32), whatever the index's bf16
    q = "Who took Photo 51?"
    done = anygrain_without_torch(cache, "search", str(index), q, "--rescore", "2")
    assert done.returncode == 0 and "Rosalind Franklin" in done.stdout, done.stderr[-3000:]


def test_serve_without_torch(built: tuple[Path, Path]) -> None:
    """The server answers the phrase and answer grains (the shipped reader) without torch."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    index, cache = built
    code = PRELUDE + (
        "import json\n"
        "from fastapi.testclient import TestClient\n"
        "from anygrain.serve.app import create_app\n"
        f"c = TestClient(create_app({str(index)!r}, warm_up=False))\n"
        "q = 'Which team represented the AFC at Super Bowl 50?'\n"
        "out = {u: c.get('/search', params={'q': q, 'unit': u, 'k': 3}).json()\n"
        "       for u in ('phrase', 'answer')}\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(cache), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert "Denver Broncos" in json.dumps(out["phrase"])
    assert "Denver Broncos" in json.dumps(out["answer"])


def test_a_model_copied_into_an_index_searches_without_torch(tmp_path: Path) -> None:
    """An index built with torch that carries a copy of the shipped model (--copy-model)
    carries its graphs too, so the base install searches it."""
    pytest.importorskip("torch")
    from anygrain import api

    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    api.build_index(
        tmp_path / "corpus.txt",
        kind="phrase",
        out=tmp_path / "idx",
        copy_model=True,
        progress=False,
    )
    assert (tmp_path / "idx" / "phrase" / "model" / "graphs" / "phrase-question").is_dir()
    cache = tmp_path / "cache"
    q = "Who was the first woman to win a Nobel Prize?"
    done = anygrain_without_torch(cache, "search", str(tmp_path / "idx"), q, "--unit", "phrase")
    assert done.returncode == 0 and "Marie Curie" in done.stdout, done.stderr[-3000:]


def test_the_demo_twice_without_torch(built: tuple[Path, Path], tmp_path: Path) -> None:
    """The second ``anygrain demo`` reuses the index the first built: checking that it holds
    the shipped model reads the model's config without torch."""
    _, cache = built
    out = tmp_path / "demo"
    args = ("demo", "--out", str(out), "--max-documents", "2", "--no-read", "-q")
    first = anygrain_without_torch(cache, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout.splitlines()[-1])["reused_index"] is False
    second = anygrain_without_torch(cache, *args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "reusing the demo index" in second.stderr
    assert json.loads(second.stdout.splitlines()[-1])["reused_index"] is True


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: what only torch does, each refused without it: (name, arguments; INDEX, CORPUS,
#: QUESTIONS, OUT and PORT filled in)
TORCH_ONLY = [
    ("train phrase", ["train", "phrase", "--train", "QUESTIONS", "--out", "OUT"]),
    ("train reader", ["train", "reader", "--train", "QUESTIONS", "--out", "OUT"]),
    ("train dpr", ["train", "dpr", "--train", "QUESTIONS", "--out", "OUT"]),
    (
        "train query side",
        ["train", "phrase-query-side", "INDEX", "--train", "QUESTIONS", "--out", "OUT"],
    ),
    ("pack", ["pack", "INDEX", "--out", "OUT"]),
    ("search runtime torch", ["search", "INDEX", "Who won?", "--runtime", "torch"]),
    ("search rescore bf16", ["search", "INDEX", "Who won?", "--rescore", "2", "--rescore-bf16"]),
    ("eval runtime torch", ["eval", "INDEX", "--questions", "QUESTIONS", "--runtime", "torch"]),
    (
        "index phrase runtime torch",
        ["index", "CORPUS", "--out", "OUT", "--kind", "phrase", "--runtime", "torch", "-q"],
    ),
    ("index dense", ["index", "CORPUS", "--out", "OUT", "--kind", "dense", "-q"]),
    ("index hybrid", ["index", "CORPUS", "--out", "OUT", "--kind", "hybrid", "-q"]),
    ("demo dense", ["demo", "--out", "OUT", "--kind", "dense", "--max-documents", "1", "-q"]),
    ("add runtime torch", ["add", "INDEX", "CORPUS", "--runtime", "torch", "-q"]),
    ("serve question bf16", ["serve", "INDEX", "--port", "PORT", "--question-bf16"]),
    ("eval-reader bf16", ["eval-reader", "INDEX", "--questions", "QUESTIONS", "--bf16"]),
]


@pytest.mark.parametrize("args", [a for _, a in TORCH_ONLY], ids=[n for n, _ in TORCH_ONLY])
def test_what_needs_torch_is_refused_in_one_line(
    built: tuple[Path, Path], tmp_path: Path, args: list[str]
) -> None:
    """Each command or option only torch runs is refused in one line naming the extra, with
    no traceback and nothing written, rather than crashing on the import or running
    something else (the graphs in float32, or the graph model as if it were torch's)."""
    import shutil

    from anygrain.encode.onnx_runtime import TRAIN_EXTRA

    index, cache = built
    copy = tmp_path / "idx"
    shutil.copytree(index, copy)  # `add` must leave it as it was
    corpus = tmp_path / "more.txt"
    corpus.write_text("Rosalind Franklin took the X-ray image of DNA known as Photo 51.\n")
    questions = tmp_path / "questions.json"
    paragraph = {
        "context": corpus.read_text(),
        "qas": [
            {
                "id": "q1",
                "question": "Who took Photo 51?",
                "answers": [{"text": "Rosalind Franklin", "answer_start": 0}],
            }
        ],
    }
    questions.write_text(json.dumps({"data": [{"title": "DNA", "paragraphs": [paragraph]}]}))
    fill = {
        "INDEX": str(copy),
        "CORPUS": str(corpus),
        "QUESTIONS": str(questions),
        "OUT": str(tmp_path / "out"),
        "PORT": str(_free_port()),
    }
    before = (copy / "index.json").read_bytes()
    # a refusal is at once: a server that starts instead is stopped by the timeout
    done = anygrain_without_torch(cache, *[fill.get(a, a) for a in args], timeout=240)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in said, said[-3000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].endswith(TRAIN_EXTRA), done.stderr[-3000:]
    for asked in ("--bf16", "--runtime", "--rescore-bf16", "--question-bf16"):
        if asked in args:
            assert asked in errors[0], errors[0]  # the option asked for is the one named
    assert not (tmp_path / "out").exists()
    assert (copy / "index.json").read_bytes() == before
