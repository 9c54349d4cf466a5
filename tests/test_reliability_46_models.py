"""Models that say what they are, and the remaining tracebacks (reliability, round 46).

- A reader records the corpus languages it was trained for, and a reader used on a corpus of
  another language is refused in one line naming both (warned, over a multilingual base).
- A model whose weights hold NaN or infinity is refused at load, naming it and the tensor; a
  reader whose logits come out non-finite is refused at first use, never "no answers".
- ``Index.from_texts`` / ``from_documents`` refuse wrong argument types by name, and text
  holding a lone surrogate (from Python or a file) is refused naming where it is.
- Every writer refuses a symbolic link loop as its target in one line naming the path.
- A phrase build records and prints whether it encoded in bf16 or float32, and on what.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from anygrain.errors import AnygrainError, ErrorLog, ErrorPolicy, InputError
from anygrain.index.base import Index
from anygrain.reader.config import ReaderConfig

pytestmark = pytest.mark.usefixtures("torch_one_thread")

ZH_TEXTS = [
    "北京是中国的首都。上海是中国最大的城市。",
    "长江是中国最长的河流，全长约六千三百公里。",
]
EN_TEXTS = [
    "The Denver Broncos won Super Bowl 50. They beat the Carolina Panthers.",
    "The break statement exits the nearest enclosing loop in Python.",
]


def _langs(reader_dir: Path) -> object:
    """The languages recorded in a saved reader's config file."""
    return json.loads((reader_dir / "anygrain_reader.json").read_text()).get("languages")


def _reader(tmp: Path, name: str, **config: object) -> Path:
    from reader_helpers import tiny_reader

    rc = ReaderConfig(max_length=48, max_question_length=16, stride=8, **config)  # type: ignore[arg-type]
    return tiny_reader(rc).save(tmp / name)


@pytest.fixture(scope="module")
def zh_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    return Index.from_texts(ZH_TEXTS, out=tmp_path_factory.mktemp("zh") / "idx")


# --- 1. readers record their languages ---------------------------------------------------


def test_reader_config_records_languages_outside_the_graph_key() -> None:
    from anygrain.models.shipped import SHIPPED
    from anygrain.reader.config import CONFIG_FILE
    from anygrain.utils.targets import MODEL_CONFIG_FILES

    assert CONFIG_FILE in MODEL_CONFIG_FILES
    cfg = ReaderConfig.from_dict({"base_model": "minilm", "languages": ["en"]})
    assert cfg.languages == ["en"] and cfg.to_dict()["languages"] == ["en"]
    assert "languages" not in cfg.reading_dict()  # answers do not depend on it
    assert ReaderConfig.from_dict({"base_model": "minilm"}).languages is None  # old readers
    with pytest.raises(AnygrainError, match="languages"):
        ReaderConfig.from_dict({"languages": "en"}, "x.json")
    # the shipped readers say what they read; their graphs still belong to their files
    assert _langs(SHIPPED["reader-minilm"].path) == ["en"]
    assert _langs(SHIPPED["reader-me5-zh"].path) == ["en", "zh"]  # its English stage came first
    for name in ("reader-minilm", "reader-me5-zh"):
        d = SHIPPED[name].path
        saved = ReaderConfig.from_dict(json.loads((d / CONFIG_FILE).read_text()))
        meta = json.loads((d / "graphs" / "reader" / "meta.json").read_text())
        assert meta["config"] == saved.reading_dict()


def test_a_reader_for_another_language_is_refused_naming_both(
    zh_index: Index, tmp_path: Path
) -> None:
    from anygrain.api import ask
    from anygrain.reader.answering import load_reader_for
    from anygrain.reader.onnx import load_reader
    from anygrain.serve.reading import load_reader as serve_reader

    en = _reader(tmp_path, "en", base_model="tiny", languages=["en"])
    for runtime in ("torch", "onnx"):
        with pytest.raises(AnygrainError) as e:
            load_reader_for(zh_index, en, runtime)
        msg = str(e.value)
        assert "\n" not in msg and "en" in msg and "zh" in msg and str(en) in msg
    with pytest.raises(AnygrainError, match="trained for en text, but the corpus is zh"):
        serve_reader(zh_index, en)  # the server's and MCP's reader
    with pytest.raises(AnygrainError, match="corpus is zh"):
        ask(zh_index, "中国的首都是哪里", en)
    # a reader given as an object is checked too, whatever runtime loaded it
    for model in (load_reader(en, "torch"), load_reader(en, "onnx")):
        assert model.config.languages == ["en"]
        with pytest.raises(AnygrainError, match="corpus is zh"):
            load_reader_for(zh_index, model)
    # the shipped English reader by name: refused before it loads
    with pytest.raises(AnygrainError, match="reader reader-minilm: trained for en"):
        load_reader_for(zh_index, "reader-minilm")


def test_multilingual_and_unrecorded_readers_read_on(
    zh_index: Index, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from anygrain.reader.answering import load_reader_for

    multi = _reader(tmp_path, "multi", base_model="tiny-multilingual", languages=["en"])
    with caplog.at_level(logging.WARNING, logger="anygrain"):
        model = load_reader_for(zh_index, multi, "torch")
    assert model.config.languages == ["en"]
    warned = [r.getMessage() for r in caplog.records if "multilingual" in r.getMessage()]
    assert len(warned) == 1 and "en" in warned[0] and "zh" in warned[0]
    old = _reader(tmp_path, "old", base_model="tiny")  # saved before languages were
    assert load_reader_for(zh_index, old, "torch").config.languages is None
    zh = _reader(tmp_path, "zh", base_model="tiny", languages=["zh"])
    assert load_reader_for(zh_index, zh, "torch").config.languages == ["zh"]


def _squad(path: Path, title: str, context: str, question: str, answer: str) -> Path:
    qa = {
        "id": f"{title}-q",
        "question": question,
        "answers": [{"text": answer, "answer_start": context.index(answer)}],
    }
    para = {"context": context, "qas": [qa]}
    data = {"version": "1.1", "data": [{"title": title, "paragraphs": [para]}]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_trained_reader_records_its_training_languages(tmp_path: Path) -> None:
    from reader_helpers import tiny_bert

    from anygrain.train.reader.config import ReaderTrainConfig
    from anygrain.train.reader.trainer import train_reader

    encoder, tok = tiny_bert()
    base = tmp_path / "tiny-bert"
    encoder.save_pretrained(str(base))
    tok.save_pretrained(str(base))
    en = _squad(
        tmp_path / "en.json", "Towns", "Xalor was founded in 1203 by Mirena Vos.",
        "When was Xalor founded?", "1203",
    )  # fmt: skip
    zh = _squad(
        tmp_path / "zh.json", "城市", "北京是中国的首都，长江是中国最长的河流。",
        "中国的首都是哪里？", "北京",
    )  # fmt: skip
    common = dict(epochs=1, batch_size=1, negatives=0, max_length=64, max_question_length=16,
                  stride=16, log_every=1)  # fmt: skip
    first = train_reader(
        ReaderTrainConfig(train=[f"squad:{en}"], out=str(tmp_path / "a"), model=str(base),
                          **common),  # type: ignore[arg-type]
        progress=False,
    )  # fmt: skip
    assert _langs(first) == ["en"]
    # continuing on Chinese data: it was trained for both
    second = train_reader(
        ReaderTrainConfig(train=[f"squad:{zh}"], out=str(tmp_path / "b"), model=str(first),
                          **common),  # type: ignore[arg-type]
        progress=False,
    )  # fmt: skip
    assert _langs(second) == ["en", "zh"]


# --- 2. non-finite weights and outputs ---------------------------------------------------


def _poison(module: torch.nn.Module, name: str) -> None:
    with torch.no_grad():
        dict(module.named_parameters())[name].view(-1)[0] = float("nan")


def test_a_reader_with_nan_weights_is_refused_at_load(tmp_path: Path) -> None:
    from reader_helpers import tiny_reader

    from anygrain.reader.onnx import load_reader

    reader = tiny_reader(ReaderConfig(base_model="tiny", max_length=48, max_question_length=16,
                                      stride=8))  # fmt: skip
    _poison(reader, "qa.weight")
    path = reader.save(tmp_path / "nan-reader")
    for runtime in ("torch", "onnx"):
        with pytest.raises(AnygrainError) as e:
            load_reader(path, runtime)
        assert str(path) in str(e.value) and "qa.weight" in str(e.value)
        assert "NaN or infinite" in str(e.value) and "\n" not in str(e.value)


def test_non_finite_reader_logits_are_refused_at_first_use(zh_index: Index) -> None:
    """A reader whose weights went bad in memory (or a graph computing NaN): reading stops
    with an error naming it, instead of finding no answer."""
    from reader_helpers import tiny_reader

    from anygrain.reader.answering import ReadSettings, read_passages

    reader = tiny_reader(ReaderConfig(base_model="tiny", max_length=48, max_question_length=16,
                                      stride=8))  # fmt: skip
    _poison(reader, "selector.bias")
    with pytest.raises(AnygrainError, match="reader tiny: .* NaN or infinite logits"):
        read_passages(zh_index, reader, ["中国的首都"], k=1, settings=ReadSettings(bf16=False))


def test_phrase_models_and_bi_encoders_with_nan_weights_are_refused_at_load(
    model_dir: Path, tmp_path: Path
) -> None:
    from dense_helpers import tiny_biencoder

    from anygrain.models.base import load_model
    from anygrain.phrase import PhraseEncoder

    phrase = PhraseEncoder.load(model_dir)
    name = next(n for n, p in phrase.named_parameters() if p.dim() == 2)
    _poison(phrase, name)
    bad_phrase = phrase.save(tmp_path / "phrase")
    bi = tiny_biencoder()
    bi_name = next(n for n, p in bi.named_parameters() if p.dim() == 2)
    with torch.no_grad():
        dict(bi.named_parameters())[bi_name].view(-1)[0] = float("inf")
    bad_bi = bi.save(tmp_path / "bi")
    for path, tensor in ((bad_phrase, name), (bad_bi, bi_name)):
        with pytest.raises(AnygrainError) as e:
            load_model(path, verify=False)
        assert str(path) in str(e.value) and tensor in str(e.value)


# --- 3. wrong argument types, lone surrogates --------------------------------------------


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: Index.from_texts(None), "texts"),  # type: ignore[arg-type]
        (lambda: Index.from_texts("one text"), "texts"),
        (lambda: Index.from_texts(5), "texts"),  # type: ignore[arg-type]
        (lambda: Index.from_texts(["a b"], metadatas={"a": 1}), "metadatas"),  # type: ignore[arg-type]
        (lambda: Index.from_texts(["a b"], ids="1"), "ids"),
        (lambda: Index.from_texts(["a b"], out=5), "out"),  # type: ignore[arg-type]
        (lambda: Index.from_texts(["a b"], kind=5), "indexkind"),  # type: ignore[arg-type]
        (lambda: Index.from_documents(None), "docs"),  # type: ignore[arg-type]
        (lambda: Index.from_documents({"text": "a b"}), "docs"),
    ],
)
def test_wrong_argument_types_are_refused_by_name(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AnygrainError) as e:
        call()
    assert name in str(e.value) and "\n" not in str(e.value)


def test_a_lone_surrogate_is_refused_naming_where(tmp_path: Path) -> None:
    from anygrain.corpus.store import CorpusStore

    with pytest.raises(InputError, match=r"document 1: text .*U\+D800 at character 3"):
        Index.from_texts(["fine text", "abc\ud800def"])
    with pytest.raises(InputError, match="document 0: metadata"):
        Index.from_texts(["fine text"], metadatas=[{"note": "x\udc80"}])
    # a JSON escape in a file makes one too: its file and line, and --on-error skip counts it
    f = tmp_path / "docs.jsonl"
    f.write_text('{"id": "a", "text": "good text"}\n{"id": "b", "text": "abc\\ud800def"}\n')
    with pytest.raises(InputError) as e:
        Index.build(f"jsonl:{f}", kind="bm25", out=tmp_path / "idx", progress=False)
    assert f"{f}:2" in str(e.value) and "U+D800" in str(e.value)
    errors = ErrorLog(ErrorPolicy.SKIP)
    store = CorpusStore.build(f"jsonl:{f}", tmp_path / "corpus", errors=errors, progress=False)
    assert len(store) == 1 and errors.n_skipped == 1


def test_a_query_with_a_lone_surrogate_is_refused_on_every_door(tmp_path: Path) -> None:
    """Invalid UTF-8 in a command-line argument becomes a lone surrogate (surrogateescape),
    which the tokenizers refuse with a TypeError deep inside."""
    from fastapi.testclient import TestClient

    from anygrain import api
    from anygrain.serve import create_app

    index = Index.from_texts(EN_TEXTS, kind="bm25", out=tmp_path / "idx")
    with pytest.raises(AnygrainError, match=r"query 1 holds a lone surrogate \(U\+DCFF"):
        api.search_index(index, ["Who won\udcff"], 1)
    client = TestClient(create_app(index.path))
    r = client.get("/search", params={"q": "fine"})
    assert r.status_code == 200
    r = client.post("/search", content=b'{"questions": ["Who won\\udcff"]}',
                    headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code in (400, 422) and "lone surrogate" in r.text, r.text


# --- 4. symbolic link loops --------------------------------------------------------------


def test_writers_refuse_a_symlink_loop_in_one_line(tmp_path: Path) -> None:
    from anygrain import api
    from anygrain.cli.main import get_app

    loop = tmp_path / "loop"
    os.symlink(loop, loop)  # ln -s loop loop
    attempts = [
        lambda: Index.from_texts(EN_TEXTS, out=loop),
        lambda: Index.from_texts(EN_TEXTS, out=loop / "sub"),
        lambda: api.attach_sparse(loop, progress=False),
        lambda: api.add_documents(loop, f"text:{tmp_path}", progress=False),
        lambda: api.delete_documents(loop, ["0"]),
        lambda: api.compact_index(loop, progress=False),
    ]
    for attempt in attempts:
        with pytest.raises(AnygrainError, match="symbolic link") as e:
            attempt()
        assert str(loop) in str(e.value) and "\n" not in str(e.value)
    src = tmp_path / "c.txt"
    src.write_text(EN_TEXTS[0])
    runner = CliRunner()
    for args in (
        ["index", str(src), "--kind", "bm25", "--out", str(loop), "-q"],
        ["attach-sparse", str(loop), "-q"],
    ):
        r = runner.invoke(get_app(), args)
        out = r.output.strip()
        assert r.exit_code == 2, out
        assert out.startswith("error:") and "symbolic link loop" in out and str(loop) in out
        assert "Traceback" not in out and r.exception is None or isinstance(r.exception, SystemExit)


# --- 5. what a phrase build encoded with -------------------------------------------------


def test_a_phrase_build_says_how_it_encoded(model_dir: Path, tmp_path: Path) -> None:
    from anygrain.api import refilter_index
    from anygrain.cli.main import get_app

    idx = Index.from_texts(EN_TEXTS, kind="phrase", model=str(model_dir), bf16=False,
                           int8=False, keep_dump=True, out=tmp_path / "p")  # fmt: skip
    want = {"precision": "float32", "runtime": "torch", "device": "cpu"}
    assert idx.summary()["encoding"] == want
    assert json.loads((idx.path / "index.json").read_text())["timings"]["encoding"] == want
    src = tmp_path / "c.txt"
    src.write_text("\n".join(EN_TEXTS))
    r = CliRunner().invoke(
        get_app(),
        ["index", str(src), "--kind", "phrase", "--model", str(model_dir), "--bf16",
         "--runtime", "torch", "--out", str(tmp_path / "q"), "-q"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "encoded in bf16 on torch (cpu)" in r.output
    # refiltering it into a link loop: one line naming the path
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    with pytest.raises(AnygrainError, match="symbolic link loop") as e:
        refilter_index(idx.path, loop, keep=0.5, progress=False)
    assert str(loop) in str(e.value)
