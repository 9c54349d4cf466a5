"""A shipped phrase model on its shipped graphs alone: builds and searches without torch.

A base install (no torch, no transformers) indexes with a shipped phrase model
(``phrase-minilm``, ``phrase-me5-zh``) through :class:`GraphPhraseModel`: its config comes
from the model's ``anygrain_phrase.json``, its passage side from the passage graph it ships
without weights (:mod:`anygrain.encode.shipped_graphs`, rebuilt with NumPy into the graph
cache, refused when the model's or backbone's files changed since), and its fingerprint is
the one recorded with that graph -- the files it was made from checked by sha256, so it is
the fingerprint of the weights installed.  It offers what a build asks of a
:class:`~anygrain.phrase.model.PhraseEncoder`: ``config``, ``dim``,
``phrase_fingerprint()``, ``encode_passages`` (ONNX Runtime, float32), ``save`` (a copy of
the packed files).  Training, a bf16 build and a GPU need the torch model (``anygrain[train]``).

:func:`as_phrase_model <anygrain.phrase.build.as_phrase_model>` gives one where torch is not
installed; with torch, the model itself is loaded as before.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anygrain.encode.onnx_runtime import TRAIN_EXTRA, GraphCache, files_signature
from anygrain.errors import AnygrainError
from anygrain.phrase.config import MODEL_CONFIG, PhraseConfig


class GraphPhraseModel:
    """A shipped phrase model whose passage side runs on its shipped graph (no torch)."""

    runtime = "onnx"

    def __init__(self, model_dir: Path, *, cache: GraphCache | None = None) -> None:
        from anygrain.models.shipped import shipped_graph_record
        from anygrain.phrase.onnx import PASSAGE_KIND, OnnxPassageEncoder, model_files

        self.model_dir = Path(model_dir)
        cache = cache or GraphCache.default()
        f = self.model_dir / MODEL_CONFIG
        try:
            d = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise AnygrainError(f"{f}: unreadable phrase model config ({e})") from None
        self.config = PhraseConfig.from_dict(d, str(f))
        sig = files_signature(model_files(self.model_dir))
        record = cache.files_record(sig, PASSAGE_KIND) or shipped_graph_record(
            self.model_dir, PASSAGE_KIND, cache, sig, files_kind=PASSAGE_KIND
        )
        if record is None or not record.get("phrase_fingerprint"):
            raise AnygrainError(
                f"{self.model_dir}: this phrase model ships no passage graph of its files, "
                f"and exporting one needs torch and transformers, not installed: {TRAIN_EXTRA}"
            )
        self.fingerprint = str(record["phrase_fingerprint"])
        if self.config.phrase_fingerprint and self.config.phrase_fingerprint != self.fingerprint:
            raise AnygrainError(
                f"{f}: phrase_fingerprint {self.config.phrase_fingerprint} is not the "
                f"{self.fingerprint} of its shipped graph"
            )
        self.config.phrase_fingerprint = self.fingerprint
        self.passages = OnnxPassageEncoder(cache.entry(str(record["key"])))

    @property
    def dim(self) -> int:
        return int(self.config.hidden_size)

    def phrase_fingerprint(self) -> str:
        return self.fingerprint

    def encode_passages(
        self,
        texts: Sequence[str],
        titles: Sequence[str] | None = None,
        *,
        bf16: bool = False,
        **kw: Any,
    ) -> Any:
        # the graph computes in float32, bf16 or not: re-scoring a bf16 index's passages
        # takes them so (they differ by bfloat16's rounding); a build refuses bf16 here
        # before it starts and an add records float32 (phrase.build.resolve_bf16,
        # phrase.update.update_bf16), so no index records bf16 for what ran in float32
        return self.passages.encode_passages(texts, titles, **kw)

    def onnx_passages(self, cache: GraphCache) -> Any:
        """The passage side on ONNX Runtime (its shipped graph)."""
        return self.passages

    def release(self) -> None:
        self.passages.release()

    def resident_bytes(self) -> int:
        """What it keeps resident besides the runtime: the token table's rows it reads are
        mapped from a file and given back after each shard."""
        return 0

    def save(self, out: Path) -> None:
        """Copy the model (its packed files and shipped graphs) into ``out``: what
        :meth:`~anygrain.phrase.model.PhraseEncoder.save` writes of an unchanged packed
        model, the config last."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in self.model_dir.iterdir() if p.is_file())
        for name in [n for n in names if n != MODEL_CONFIG] + [MODEL_CONFIG]:
            tmp = out / f".{name}.{os.getpid()}.tmp"
            shutil.copyfile(self.model_dir / name, tmp)
            os.replace(tmp, out / name)
        graphs = self.model_dir / "graphs"
        if graphs.is_dir():
            shutil.copytree(graphs, out / "graphs", dirs_exist_ok=True)
