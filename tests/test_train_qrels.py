"""DPR training from qrels: judged passages as positives (Multi-CPR, BEIR), BM25 hard
negatives that are not judged relevant, merged domains with id prefixes, recipes.

Runs on the tiny random BERT of test_train_dpr and on data the tests write; one test
reads the real Multi-CPR ecom train queries and qrels with a corpus it synthesises.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import shared_file
from test_train_dpr import tiny_model  # noqa: F401  (a module-scoped fixture)

from anygrain.corpus.questions import Question
from anygrain.corpus.readers.multicpr import read_multicpr_questions
from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.models.biencoder import BiEncoder
from anygrain.sparse.bm25 import BM25Index
from anygrain.train.dpr import DprTrainConfig
from anygrain.train.dpr.data import (
    Supervision,
    load_training_data,
    mine_bm25_hard_negatives,
    supervision_of,
)
from anygrain.train.dpr.losses import false_negative_mask
from anygrain.train.dpr.recipe import builtin_recipes, load_recipe, parse_vars, recipe_config
from anygrain.train.dpr.trainer import train_dpr
from anygrain.train.run_dir import LOG_FILE

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# --- fixtures ---------------------------------------------------------------------------------

# (qid, query, judged pid, text of the judged passage)
ECOM = [
    ("100", "红色连衣裙", "7", "夏季新款红色连衣裙 修身显瘦 雪纺长裙"),
    ("101", "蓝牙耳机 无线", "8", "无线蓝牙耳机 降噪 入耳式 运动耳机"),
    ("102", "儿童自行车", "9", "儿童自行车 带辅助轮 三岁以上 男孩女孩"),
    ("103", "不锈钢保温杯", "10", "不锈钢保温杯 大容量 男士 便携水杯"),
    ("104", "机械键盘 青轴", "11", "机械键盘 青轴 游戏 电竞 背光 有线"),
    ("105", "纯棉床单", "12", "纯棉床单 单件 学生宿舍 双人 被单"),
]
# Passages that share words with the queries but are not judged relevant.
ECOM_DISTRACTORS = [
    ("1", "红色连衣裙 童装 女童 公主裙"),
    ("2", "蓝牙音箱 无线 低音炮 家用"),
    ("3", "自行车 山地车 成人 变速"),
    ("4", "保温杯 儿童 吸管杯 卡通"),
    ("5", "键盘 鼠标 套装 办公 静音"),
    ("6", "床单 被套 四件套 纯棉 加厚"),
]
VIDEO = [
    ("100", "甄嬛传 全集", "7", "后宫甄嬛传 电视剧 全集 高清在线观看"),
    ("101", "海贼王 动漫", "8", "海贼王 动漫 第一季 日语中字"),
    ("102", "流浪地球 电影", "9", "流浪地球 科幻电影 吴京 高清"),
]
VIDEO_DISTRACTORS = [("1", "甄嬛传 演员 采访"), ("2", "动漫 推荐 热血"), ("3", "电影 票房 排行")]


def _domain(
    root: Path, name: str, queries: list[tuple[str, str, str, str]], extra: list[tuple[str, str]]
) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "train.query.txt").write_text(
        "".join(f"{q}\t{t}\n" for q, t, _, _ in queries), encoding="utf-8"
    )
    qrels = "".join(f"{q}\t0\t{p}\t1\n" for q, _, p, _ in queries)
    (d / "qrels.train.tsv").write_text(qrels, encoding="utf-8")
    corpus = [(p, text) for _, _, p, text in queries] + extra
    (d / "corpus.tsv").write_text("".join(f"{p}\t{t}\n" for p, t in corpus), encoding="utf-8")
    return d


@pytest.fixture
def multicpr_root(tmp_path: Path) -> Path:
    root = tmp_path / "multi-cpr"
    _domain(root, "ecom", ECOM, ECOM_DISTRACTORS)
    _domain(root, "video", VIDEO, VIDEO_DISTRACTORS)
    return root


def _beir(root: Path) -> Path:
    root.mkdir()
    docs = [
        {"_id": "d1", "title": "Xalor", "text": "Xalor is a river port founded by Mirena Vos."},
        {"_id": "d2", "title": "Bretan", "text": "Bretan is a mountain town that trades wool."},
        {"_id": "d3", "title": "Xalor", "text": "The river port of Xalor exports copper."},
        {
            "_id": "d4",
            "title": "Quenby",
            "text": "Quenby is a coastal town and river port known for salt.",
        },
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [
        {"_id": "q1", "text": "what does the river port Xalor export"},
        {"_id": "q2", "text": "which town trades wool"},
        {"_id": "q3", "text": "a query with nothing relevant"},
    ]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels").mkdir()
    (root / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td3\t2\nq1\td1\t1\nq2\td2\t1\nq3\td4\t0\n"
    )
    return root


# --- data -------------------------------------------------------------------------------------


def test_supervision_follows_what_the_question_carries() -> None:
    assert supervision_of(Question("1", "q", qrels={"p": 1})) is Supervision.QRELS
    assert supervision_of(Question("1", "q", answers=["a"], gold=["p"])) is Supervision.ANSWERS
    # qrels win over answers; a question judged only non-relevant has nothing to train on
    both = Question("1", "q", answers=["a"], qrels={"p": 2})
    assert supervision_of(both) is Supervision.QRELS
    assert supervision_of(Question("1", "q", qrels={"p": 0})) is None
    assert supervision_of(Question("1", "q")) is None


def test_multicpr_questions_train_on_their_judged_passages(multicpr_root: Path) -> None:
    ecom = multicpr_root / "ecom"
    data = load_training_data(
        [f"multicpr:{ecom / 'train.query.txt'}"], corpora=[f"multicpr:{ecom / 'corpus.tsv'}"]
    )
    assert len(data.examples) == len(ECOM)
    for ex, (qid, query, pid, text) in zip(data.examples, ECOM, strict=True):
        assert ex.supervision is Supervision.QRELS
        assert ex.question == query and ex.positive == (pid, "", text)
        assert ex.relevant == (pid,) and ex.answers == []
        assert ex.qid.endswith(f":{qid}")
    assert len(data.pool) == len(ECOM) + len(ECOM_DISTRACTORS)
    # A quick subset keeps the whole corpus: the negatives are mined from it.
    sub = load_training_data(
        [f"multicpr:{ecom / 'train.query.txt'}"],
        corpora=[f"multicpr:{ecom / 'corpus.tsv'}"],
        max_examples=2,
    )
    assert len(sub.examples) == 2 and len(sub.pool) == len(data.pool)
    # The queries alone name no passages: the error says to give the corpus.
    with pytest.raises(AnygrainError, match="corpus"):
        load_training_data([f"multicpr:{ecom / 'train.query.txt'}"])
    with pytest.raises(AnygrainError, match="one per --train"):
        load_training_data([f"multicpr:{ecom / 'train.query.txt'}"], corpora=["a", "b"])


def test_judged_passages_missing_from_the_corpus_are_counted(tmp_path: Path) -> None:
    d = _domain(tmp_path, "ecom", ECOM, [])
    (d / "corpus.tsv").write_text("7\t夏季新款红色连衣裙\n1\t红色连衣裙 童装\n", encoding="utf-8")
    data = load_training_data(
        [f"multicpr:{d / 'train.query.txt'}"], corpora=[f"multicpr:{d / 'corpus.tsv'}"]
    )
    assert [ex.positive[0] for ex in data.examples] == ["7"]
    assert data.dropped == {"judged passages not in the corpus": len(ECOM) - 1}


def test_beir_positives_by_grade_and_unjudged_queries_dropped(tmp_path: Path) -> None:
    root = _beir(tmp_path / "beir")
    data = load_training_data([f"beir:{root / 'qrels' / 'train.tsv'}"])
    by_q = {ex.question: ex for ex in data.examples}
    q1 = by_q["what does the river port Xalor export"]
    assert q1.positive[0] == "d3" and q1.relevant == ("d3", "d1")  # best grade first
    assert by_q["which town trades wool"].positive[0] == "d2"
    assert data.dropped == {"no answers or relevant passages": 1}


def test_mined_negatives_are_never_judged_relevant(tmp_path: Path) -> None:
    root = _beir(tmp_path / "beir")
    data = load_training_data([f"beir:{root / 'qrels' / 'train.tsv'}"])
    store = CorpusStore.build(data.pool.documents(), tmp_path / "corpus", progress=False)
    index = BM25Index.build_from(store, tmp_path / "bm25", progress=False)
    q = "what does the river port Xalor export"
    rows, _ = index.search_rows([q], 4)
    # d1 (judged relevant, grade 1) ranks high: the filter has something to do.
    assert store.row_of("d1") in rows[0][:2].tolist()
    mined, report = mine_bm25_hard_negatives(data.examples, store, index, n=3, depth=10)
    assert report.searched == len(data.examples)
    for ex in mined:
        ids = [c[0] for c in ex.hard_negatives]
        assert not set(ids) & set(ex.relevant) and ex.positive[0] not in ids
        assert ids  # every question got one from this corpus
    x = next(ex for ex in mined if ex.question == q)
    assert [c[0] for c in x.hard_negatives] == ["d4"]


def test_mining_for_qrels_ignores_answer_matching(multicpr_root: Path, tmp_path: Path) -> None:
    """A distractor repeating the query words is a fine negative when it is not judged."""
    ecom = multicpr_root / "ecom"
    data = load_training_data(
        [f"multicpr:{ecom / 'train.query.txt'}"], corpora=[f"multicpr:{ecom / 'corpus.tsv'}"]
    )
    store = CorpusStore.build(data.pool.documents(), tmp_path / "corpus", progress=False)
    index = BM25Index.build_from(store, tmp_path / "bm25", progress=False, lang="zh")
    mined, report = mine_bm25_hard_negatives(data.examples, store, index, n=1, depth=10)
    assert report.n_without == 0
    first = mined[0]
    assert first.question == "红色连衣裙" and first.hard_negatives[0][0] == "1"


def test_merged_domains_prefix_ids_consistently(multicpr_root: Path) -> None:
    specs, corpora, prefixes = [], [], []
    for name in ("ecom", "video"):
        specs.append(f"multicpr:{multicpr_root / name / 'train.query.txt'}")
        corpora.append(f"multicpr:{multicpr_root / name / 'corpus.tsv'}")
        prefixes.append(f"{name}-")
    data = load_training_data(specs, corpora=corpora, id_prefixes=prefixes)
    assert len(data.examples) == len(ECOM) + len(VIDEO)
    assert data.pool.renamed == 0  # "7" of ecom and "7" of video stay apart by prefix
    assert len(data.pool) == len(ECOM) + len(ECOM_DISTRACTORS) + len(VIDEO) + len(VIDEO_DISTRACTORS)
    video = data.examples[len(ECOM)]
    assert video.positive == ("video-7", "", VIDEO[0][3]) and video.relevant == ("video-7",)
    assert video.qid.startswith("video-")
    assert data.examples[0].positive[0] == "ecom-7"
    # The reader gives evaluation the same ids: queries, qrels and corpus.
    qs = read_multicpr_questions(
        multicpr_root / "video" / "train.query.txt", ErrorLog(), prefix="video-"
    )
    assert qs[0].id == "video-100" and qs[0].qrels == {"video-7": 1}


def test_multicpr_root_merges_every_domain(multicpr_root: Path) -> None:
    from anygrain.corpus.formats import parse_source

    for name in ("ecom", "video"):
        d = multicpr_root / name
        (d / "dev.query.txt").write_text((d / "train.query.txt").read_text("utf-8"), "utf-8")
        (d / "qrels.dev.tsv").write_text((d / "qrels.train.tsv").read_text("utf-8"), "utf-8")
    src = parse_source(multicpr_root, want="questions")
    assert src.format.name == "multicpr"
    qs = src.questions()
    assert [q.id for q in qs][:2] == ["ecom-100", "ecom-101"] and qs[-1].id == "video-102"
    assert qs[-1].qrels == {"video-9": 1}
    docs = list(parse_source(f"multicpr:{multicpr_root}").documents())
    ids = [d.passages[0].id for d in docs if d.passages]
    assert ids[0] == "ecom-7" and "video-7" in ids and len(ids) == len(set(ids)) == 18


def test_false_negative_mask_hides_other_judged_passages() -> None:
    # question 0 also has "b" (question 1's positive) judged relevant
    m = false_negative_mask(["a", "b"], ["a", "b", "x", "a"], [("a", "b"), ("b",)])
    assert m is not None
    assert m.tolist() == [[False, True, False, True], [False, False, False, False]]


# --- training -----------------------------------------------------------------------------------


def _train_config(model: Path, root: Path, out: Path, **kw: object) -> DprTrainConfig:
    d = root / "ecom"
    base: dict[str, object] = {
        "train": [f"multicpr:{d / 'train.query.txt'}"],
        "corpus": [f"multicpr:{d / 'corpus.tsv'}"],
        "out": str(out),
        "model": str(model),
        "batch_size": 3,
        "lr": 1e-3,
        "epochs": 1,
        "max_query_length": 16,
        "max_passage_length": 32,
        "checkpoint_every": 0,
        "log_every": 1,
    }
    base.update(kw)
    return DprTrainConfig(**base)  # type: ignore[arg-type]


def _log(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]


def test_train_dpr_on_multicpr_qrels(
    tiny_model: Path,  # noqa: F811
    multicpr_root: Path,
    tmp_path: Path,
) -> None:
    out = train_dpr(_train_config(tiny_model, multicpr_root, tmp_path / "m"), progress=False)
    BiEncoder.load(out)
    events = _log(out)
    start = next(e for e in events if e["event"] == "start")
    assert start["examples"] == len(ECOM) and start["supervision"] == {"answers": 0, "qrels": 6}
    assert start["batch_size"] == 3 and start["in_batch_negatives"] == 2
    said = " ".join(str(e.get("message", "")) for e in events)
    assert "batch 3: 2 in-batch negatives" in said
    assert f"BM25 hard negatives for {len(ECOM)}/{len(ECOM)} questions" in said
    done = events[-1]
    assert done["event"] == "done" and done["step"] == 2


def test_cli_recipe_runs_with_overrides(
    tiny_model: Path,  # noqa: F811
    multicpr_root: Path,
    tmp_path: Path,
) -> None:
    import typer
    from typer.testing import CliRunner

    from anygrain.cli.train import train_app

    app = typer.Typer()
    app.add_typer(train_app, name="train")
    recipe = json.loads(
        (Path(__file__).parents[1] / "src/anygrain/recipes/multicpr-merged.json").read_text()
    )
    recipe["config"].update(model=str(tiny_model), max_passage_length=32)
    for key in ("train", "corpus", "id_prefix"):  # the fixture has no medical domain
        recipe["config"][key] = [v for v in recipe["config"][key] if "medical" not in v]
    path = tmp_path / "merged.json"
    path.write_text(json.dumps(recipe))
    out = tmp_path / "cli"
    args = ["train", "dpr", "--recipe", str(path), "--var", f"MULTICPR={multicpr_root}"]
    args += ["--out", str(out), "--batch-size", "4", "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    saved = DprTrainConfig.load(out)
    assert saved.batch_size == 4 and saved.id_prefix == ["ecom-", "video-"]
    assert saved.model == str(tiny_model) and saved.hard_negatives == 1  # from the recipe
    start = next(e for e in _log(out) if e["event"] == "start")
    assert start["examples"] == len(ECOM) + len(VIDEO)
    missing = CliRunner().invoke(app, ["train", "dpr", "--recipe", str(path), "--out", "x"])
    assert missing.exit_code != 0 and "MULTICPR" in missing.output
    listed = CliRunner().invoke(app, ["train", "recipes"])
    assert "multicpr-indomain" in listed.output and "--var DOMAIN" in listed.output


def test_builtin_recipes_load_and_fill() -> None:
    assert {"multicpr-indomain", "multicpr-merged"} <= set(builtin_recipes())
    r = load_recipe("multicpr-indomain")
    cfg = recipe_config(
        r, parse_vars(["MULTICPR=/data/m", "DOMAIN=video"]), overrides={"out": "o"}, environ={}
    )
    assert cfg.train == ["multicpr:/data/m/video/train.query.txt"]
    assert cfg.corpus == ["multicpr:/data/m/video/corpus.tsv"]
    assert cfg.model == "me5-small" and cfg.batch_size == 64
    cfg.validate()
    with pytest.raises(AnygrainError, match="DOMAIN"):
        recipe_config(r, {"MULTICPR": "/m"}, overrides={"out": "o"}, environ={})
    with pytest.raises(AnygrainError, match="NAME=VALUE"):
        parse_vars(["nope"])


# --- real data --------------------------------------------------------------------------------------


def _synthetic_corpus(qrels_path: Path, n_queries: int, out: Path, seed: int = 0) -> set[str]:
    """A corpus holding the judged pids of the first ``n_queries`` queries (made-up text)
    plus as many distractors; returns the judged pids."""
    rng = random.Random(seed)
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 2000)]
    qids: list[str] = []
    pids: list[str] = []
    with open(qrels_path, encoding="utf-8") as f:
        for line in f:
            qid, _, pid, _ = line.rstrip("\n").split("\t")
            if qid not in qids:
                if len(qids) == n_queries:
                    break
                qids.append(qid)
            pids.append(pid)
    judged = set(pids)
    lines = [f"{p}\t{''.join(rng.choices(chars, k=rng.randint(8, 30)))}\n" for p in pids]
    lines += [
        f"x{i}\t{''.join(rng.choices(chars, k=rng.randint(8, 30)))}\n" for i in range(len(pids))
    ]
    out.write_text("".join(lines), encoding="utf-8")
    return judged


def test_real_ecom_train_queries_with_a_generated_corpus(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    queries = shared_file("multi-cpr/ecom/train.query.txt")
    qrels = shared_file("multi-cpr/ecom/qrels.train.tsv")
    corpus = tmp_path / "corpus.tsv"
    judged = _synthetic_corpus(qrels, 300, corpus)
    data = load_training_data([f"multicpr:{queries}"], corpora=[f"multicpr:{corpus}"])
    assert len(data.examples) == 300
    assert all(ex.supervision is Supervision.QRELS for ex in data.examples)
    assert {ex.positive[0] for ex in data.examples} <= judged
    assert sum(data.dropped.values()) == 100_000 - 300  # the rest have no passage here
    out = train_dpr(
        DprTrainConfig(
            train=[f"multicpr:{queries}"],
            corpus=[f"multicpr:{corpus}"],
            out=str(tmp_path / "model"),
            model=str(tiny_model),
            batch_size=16,
            max_examples=32,
            max_query_length=16,
            max_passage_length=32,
            checkpoint_every=0,
        ),
        progress=False,
    )
    events = _log(out)
    assert events[-1]["event"] == "done" and events[-1]["step"] == 2
    start = next(e for e in events if e["event"] == "start")
    assert start["examples"] == 32 and start["passages"] == 2 * len(judged)
    BiEncoder.load(out)
