"""Issue 34, class 2 (and the train_log.jsonl message of class 8): where a command writes.

Every trainer's ``--out`` goes through the output-target check the other writers use,
and more, since a run writes *into* its directory: a symbolic link, a saved or packed
model, an index, a directory holding anything a run of that trainer did not write (the
user's own ``train_log.jsonl`` among them) are refused with one line before anything is
written.  Every other command that writes refuses a symbolic link as its target too, and
an update given a link to an index updates the index it points to.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability34_helpers import jsonl, one_line_error, tree
from typer.testing import CliRunner

from anygrain.cli.main import app
from anygrain.index.base import Index

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TRAINERS = {
    "dpr": lambda data: ["train", "dpr", "--train", f"squad:{data}"],
    "phrase": lambda data: ["train", "phrase", "--train", f"squad:{data}"],
    "reader": lambda data: ["train", "reader", "--train", f"squad:{data}"],
    "phrase-query-side": lambda data: [
        "train",
        "phrase-query-side",
        str(data.parent / "idx"),
        "--train",
        f"squad:{data}",
    ],
}
CONFIG_FILE = {
    "dpr": "train_config.json",
    "phrase": "train_config.json",
    "reader": "reader_train_config.json",
    "phrase-query-side": "query_side_config.json",
}


def _user_dir(root: Path) -> Path:
    d = root / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("my notes\n")
    return d


def _link_to_full(root: Path) -> Path:
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0\n")
    (root / "LINK").symlink_to(root / "etc")
    return root / "LINK"


def _link_to_empty(root: Path) -> Path:
    (root / "empty").mkdir()
    (root / "LINK").symlink_to(root / "empty")
    return root / "LINK"


def _packed_model(root: Path) -> Path:
    d = root / "packed"
    d.mkdir()
    (d / "anygrain_packed.json").write_text('{"format": "anygrain.packed"}')
    (d / "packed.safetensors").write_bytes(b"\0" * 64)
    return d


def _phrase_model(root: Path) -> Path:
    d = root / "model"
    (d / "phrase").mkdir(parents=True)
    (d / "phrase" / "config.json").write_text("{}")
    (d / "heads.safetensors").write_bytes(b"\0" * 64)
    (d / "anygrain_phrase.json").write_text('{"format": "anygrain.phrase"}')
    return d


def _index(root: Path) -> Path:
    Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "anidx", progress=False)
    return root / "anidx"


def _user_log(root: Path) -> Path:
    """The user's own train_log.jsonl, nothing else."""
    d = root / "logs"
    d.mkdir()
    (d / "train_log.jsonl").write_text("epoch 1: loss 0.5\n")
    return d


def _own_config_user_log(trainer: str) -> Callable[[Path], Path]:
    """A directory that looks like a run of ``trainer`` but for its log, not anygrain's."""

    def make(root: Path) -> Path:
        d = root / "run"
        d.mkdir()
        (d / CONFIG_FILE[trainer]).write_text("{}")
        (d / "train_log.jsonl").write_text('{"step": 1}\nnot json at all\n')
        return d

    return make


def _other_trainers_config(root: Path) -> Path:
    d = root / "other"
    d.mkdir()
    for name in set(CONFIG_FILE.values()):
        (d / name).write_text('{"some_other_trainers_field": 1}')
    return d


TARGETS: list[tuple[str, Callable[[Path], Path], str]] = [
    ("link to a full dir", _link_to_full, "is a symbolic link"),
    ("link to an empty dir", _link_to_empty, "is a symbolic link"),
    ("packed model", _packed_model, "is a saved model that no training run wrote here"),
    ("phrase model", _phrase_model, "is a saved model that no training run wrote here"),
    ("index", _index, "is an anygrain index, not a place for a training run"),
    ("user files", _user_dir, "not empty (notes.txt) and not a training run's directory"),
    ("user train_log.jsonl", _user_log, "not empty (train_log.jsonl)"),
    ("another trainer's config", _other_trainers_config, "some_other_trainers_field"),
]


@pytest.fixture
def data(tmp_path: Path, squad: Path) -> Path:
    shutil.copy(squad, tmp_path / "train.json")
    jsonl(tmp_path / "docs.jsonl", [("d1", "a passage"), ("d2", "another passage")])
    return tmp_path / "train.json"


@pytest.mark.parametrize("trainer", list(TRAINERS))
@pytest.mark.parametrize(("name", "make", "says"), TARGETS, ids=[t[0] for t in TARGETS])
def test_train_out_refused(
    trainer: str, name: str, make: Callable[[Path], Path], says: str, data: Path
) -> None:
    root = data.parent
    target = make(root)
    before = tree(root)
    line = one_line_error(CliRunner().invoke(app, [*TRAINERS[trainer](data), "--out", str(target)]))
    assert says in line, line
    assert tree(root) == before


@pytest.mark.parametrize("trainer", list(TRAINERS))
def test_train_out_with_a_log_anygrain_did_not_write(trainer: str, data: Path) -> None:
    """The issue's bare JSON error: now one line naming the log and the line."""
    target = _own_config_user_log(trainer)(data.parent)
    before = tree(data.parent)
    line = one_line_error(CliRunner().invoke(app, [*TRAINERS[trainer](data), "--out", str(target)]))
    assert "train_log.jsonl: not a training log anygrain wrote (line 2 is not JSON)" in line
    assert tree(data.parent) == before


def test_a_run_directory_is_still_accepted(tmp_path: Path) -> None:
    """What an earlier run wrote (config, log, checkpoints, model) passes the check."""
    from anygrain.train.phrase.config import PhraseTrainConfig
    from anygrain.train.run_dir import check_run_target

    cfg = PhraseTrainConfig(train="squad:x.json", out=str(tmp_path / "run"))
    run = tmp_path / "run"
    run.mkdir()
    cfg.save(run)
    (run / "train_log.jsonl").write_text('{"event": "start", "step": 0}\n')
    (run / "anygrain_phrase.json").write_text("{}")
    (run / "checkpoints").mkdir()
    assert check_run_target(run, cfg) == run
    assert check_run_target(tmp_path / "new", cfg) == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".DS_Store").write_text("")
    assert check_run_target(tmp_path / "empty", cfg) == tmp_path / "empty"


# every other command that writes, given a symbolic link as its target
def _writers(root: Path, squad: Path, model_dir: Path) -> dict[str, list[str]]:
    return {
        "index": ["index", str(root / "docs.jsonl"), "--out", str(root / "LINK"), "-q"],
        "refilter": ["refilter", str(root / "p"), "--out", str(root / "LINK"), "--keep", "0.5"],
        "pack": ["pack", str(model_dir), "--out", str(root / "LINK")],
        "eval --run-out": [
            "eval",
            str(root / "anidx"),
            "--questions",
            f"squad:{squad}",
            "--run-out",
            str(root / "LINK"),
        ],
        "convert-script": ["convert-script", str(squad), str(root / "LINK")],
    }


WRITERS = ["index", "refilter", "pack", "eval --run-out", "convert-script"]


@pytest.fixture(scope="module")
def phrase_dir(squad: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("phrase") / "p"
    Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        progress=False,
        compress="none",
        keep=1.0,
    )
    return out


@pytest.mark.parametrize("command", WRITERS)
@pytest.mark.parametrize("to", ["full dir", "empty dir", "file"])
def test_writers_refuse_a_symlinked_target(
    command: str, to: str, data: Path, squad: Path, model_dir: Path, phrase_dir: Path
) -> None:
    root = data.parent
    shutil.copytree(phrase_dir, root / "p")
    _index(root)
    if to == "full dir":
        _link_to_full(root)
    elif to == "empty dir":
        _link_to_empty(root)
    else:
        (root / "afile").write_text("mine\n")
        (root / "LINK").symlink_to(root / "afile")
    before = tree(root)
    line = one_line_error(CliRunner().invoke(app, _writers(root, squad, model_dir)[command]))
    # a file target given a link to a directory may be refused as a directory first
    allowed = ["LINK: is a symbolic link"] + (["LINK: is a directory"] if "dir" in to else [])
    assert any(a in line for a in allowed), line
    assert tree(root) == before


def test_an_update_through_a_link_updates_the_index_it_names(tmp_path: Path) -> None:
    jsonl(tmp_path / "a.jsonl", [("a1", "alpha"), ("a2", "beta")])
    jsonl(tmp_path / "b.jsonl", [("b1", "gamma")])
    Index.build(str(tmp_path / "a.jsonl"), kind="bm25", out=tmp_path / "real", progress=False)
    (tmp_path / "LINK").symlink_to(tmp_path / "real")
    r = CliRunner().invoke(app, ["add", str(tmp_path / "LINK"), str(tmp_path / "b.jsonl"), "-q"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "LINK").is_symlink()
    assert len(Index.load(tmp_path / "real").corpus) == 3
    assert json.loads(r.output)["n_passages"] == 3
