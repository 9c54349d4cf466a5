"""Shared fixtures: tiny corpora written by the tests, and the path to ../shared/data."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# ANYGRAIN_SHARED_DATA points elsewhere (a git worktree has no ../shared beside it).
SHARED = Path(
    os.environ.get("ANYGRAIN_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


def shared_file(rel: str) -> Path:
    """A file under ../shared/data, or skip the test with the reason."""
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"../shared/data/{rel} not present")
    return p


@pytest.fixture(scope="session", autouse=True)
def onnx_graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ONNX graphs tests export (a phrase index's questions run on ONNX Runtime by
    default, anygrain.encode.onnx_runtime) go to a cache of the session's, not the user's."""
    from anygrain.encode import onnx_runtime

    root = tmp_path_factory.mktemp("onnx-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onnx_runtime, "default_cache_root", lambda: root)
        yield root


@pytest.fixture(scope="module")
def torch_one_thread() -> Iterator[None]:
    """Tiny test models gain nothing from threads, and on a shared CPU each op waits for them.

    Modules that run models use it with ``pytestmark = pytest.mark.usefixtures(...)``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def squad_file(tmp_path: Path) -> Path:
    """A small SQuAD v1.1-style file: 3 articles, 6 paragraphs, 8 questions."""
    paras = {
        "Alpha_Centauri": [
            (
                "Alpha Centauri is the closest star system to the Solar System. It is 4.37 light-years away.",
                [("How far away is Alpha Centauri?", "4.37 light-years")],
            ),
            (
                "The system contains three stars. Proxima Centauri is the smallest of them.",
                [("Which is the smallest star of the system?", "Proxima Centauri")],
            ),
        ],
        "Python_(language)": [
            (
                "Python was created by Guido van Rossum and first released in 1991.",
                [
                    ("Who created Python?", "Guido van Rossum"),
                    ("When was Python first released?", "1991"),
                ],
            ),
            (
                "Python uses indentation to delimit blocks. Its design emphasises readability.",
                [("What does Python use to delimit blocks?", "indentation")],
            ),
        ],
        "Great_Wall": [
            (
                "The Great Wall of China was built over many centuries to protect against raids.",
                [("Why was the Great Wall built?", "to protect against raids")],
            ),
            (
                "Its total length is about 21,196 kilometres according to a 2012 survey.",
                [
                    ("How long is the Great Wall?", "21,196 kilometres"),
                    ("When was the survey of the wall's length?", "2012"),
                ],
            ),
        ],
    }
    data = []
    qn = 0
    for title, ps in paras.items():
        art = {"title": title, "paragraphs": []}
        for ctx, qas in ps:
            items = []
            for q, a in qas:
                items.append(
                    {
                        "id": f"q{qn}",
                        "question": q,
                        "answers": [{"text": a, "answer_start": ctx.index(a)}],
                    }
                )
                qn += 1
            art["paragraphs"].append({"context": ctx, "qas": items})
        data.append(art)
    p = tmp_path / "tiny-squad.json"
    p.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny SQuAD file of ``test_phrase_helpers.PARAGRAPHS`` (once per module)."""
    from test_phrase_helpers import write_squad

    return write_squad(tmp_path_factory.mktemp("data") / "tiny.json")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random phrase model saved to disk (once per module); modules that need
    another define their own ``model_dir``."""
    from test_phrase_helpers import make_tiny_phrase_model

    return make_tiny_phrase_model(tmp_path_factory)


@pytest.fixture(scope="module")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache home of the module's: child processes get it as XDG_CACHE_HOME, so the graphs
    a module's tests export reach neither the user's cache nor another module's."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="module")
def cache_root(xdg: Path) -> Iterator[Path]:
    """The module's graph cache (under :func:`xdg`, where platformdirs puts it), in place
    of the session's, for the modules that ask for it (an autouse fixture of theirs)."""
    from anygrain.encode import onnx_runtime

    root = xdg / "anygrain" / "onnx"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onnx_runtime, "default_cache_root", lambda: root)
        yield root
