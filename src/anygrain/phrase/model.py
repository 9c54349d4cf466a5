"""The DensePhrases model: a phrase encoder and question encoders (Lee et al., 2021).

The phrase encoder reads a passage (optionally ``title [SEP] passage``) and gives
every token a start vector and an end vector (linear heads over the hidden states,
initialised as the identity so training starts from the pre-trained space).  A
phrase ``p = tokens i..j`` is ``[start_i, end_j]``; a question gives ``q_start`` and
``q_end`` and ``score(p, q) = start_i·q_start + end_j·q_end``.  A phrase filter (a
linear layer over the hidden states) gives start/end logits that say which tokens
are worth indexing.

Question encoders, by :class:`QuestionEncoderKind`:

* ``separate`` (the paper): two encoders, ``q_start`` and ``q_end`` their [CLS] states;
* ``shared``: one encoder, pooled (mean or [CLS]) through two identity-initialised
  linear heads -- half the question-side weights and compute.

Saved through the model base (:mod:`anygrain.models.base`) as a directory:
``anygrain_phrase.json`` (config, format version and the fingerprint of the weights
that make phrase vectors), ``phrase/`` and ``question*/`` Hugging Face directories,
and ``heads.safetensors``.  An index records the phrase fingerprint, so a model that
would make different phrase vectors is refused.  The packed form
(:mod:`anygrain.phrase.packed`) is another saved form of this class, loaded by the
same ``PhraseEncoder.load`` / ``load_model``.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from anygrain.errors import AnygrainError
from anygrain.models.base import (
    Model,
    ModelType,
    config_file,
    detect_model_type,
    register_model,
    saved_model_dir,
)
from anygrain.models.encoder import Pooling, check_finite, pool
from anygrain.models.hf import encoder_inputs, load_hf_dir, load_tensors, quiet_transformers
from anygrain.models.resolve import resolve_model
from anygrain.phrase.config import PhraseConfig as PhraseConfig
from anygrain.phrase.options import QuestionEncoderKind
from anygrain.phrase.passages import EncodedPassage as EncodedPassage
from anygrain.phrase.passages import PassageEncoding, WindowForward
from anygrain.phrase.tokens import Window, tokenize_windows
from anygrain.utils.device import autocast, module_device
from anygrain.utils.precision import bf16_linears, weights_version

#: held while a phrase model's tokenizer runs: questions and passages share one Hugging Face
#: fast tokenizer, which each call re-configures (truncation, stride) and which raises
#: "Already borrowed" when a second thread does so mid-call -- a server encodes questions in
#: one thread while re-scoring encodes passages in another
TOKENIZING = threading.Lock()

MODEL_CONFIG = config_file(ModelType.PHRASE)
FORMAT = "anygrain.phrase-model"
FORMAT_VERSION = 1
HEADS_FILE = "heads.safetensors"


def identity_linear(dim: int) -> nn.Linear:
    """A linear head that starts as the identity, so step 0 uses the pre-trained vectors."""
    lin = nn.Linear(dim, dim)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(dim))
        lin.bias.zero_()
    return lin


def _saved_phrase_dir(name: str | Path) -> Path | None:
    """The directory of a saved (full or packed) phrase model named by ``name``, else None
    (``name`` is then an encoder to start a new model from)."""
    try:
        path = saved_model_dir(name)
    except AnygrainError:
        return None
    kind = detect_model_type(path)
    return path if kind in (ModelType.PHRASE, ModelType.PACKED_PHRASE) else None


@register_model(ModelType.PHRASE)
class PhraseEncoder(Model, PassageEncoding):
    """Phrase encoder + filter + question encoder(s); see the module docstring."""

    format = FORMAT
    format_version = FORMAT_VERSION
    noun = "an anygrain phrase model"
    fingerprint_field = "phrase_fingerprint"
    # re-hashing (a fraction of a second) catches weights swapped or damaged on disk
    verify_on_load = True
    config: PhraseConfig

    def __init__(
        self,
        config: PhraseConfig,
        phrase: nn.Module,
        tokenizer: Any,
        questions: Sequence[nn.Module],
    ) -> None:
        super().__init__()
        d = config.hidden_size
        self.config = config
        # set when unpacked from a packed model (anygrain.phrase.packed): saving unchanged
        # weights then writes the small packed form again
        self.packed: Any = None
        self.tokenizer = tokenizer
        self.phrase = phrase
        self.start_head = identity_linear(d)
        self.end_head = identity_linear(d)
        self.filter = nn.Linear(d, 2)
        with torch.no_grad():
            self.filter.weight.normal_(0.0, 0.02)
            self.filter.bias.zero_()
        want = 2 if config.question_encoder is QuestionEncoderKind.SEPARATE else 1
        if len(questions) != want:
            raise AnygrainError(
                f"{config.question_encoder.value} question encoder needs {want} model(s)"
            )
        self.questions = nn.ModuleList(questions)
        # bfloat16 copies of the question encoders for CPU inference (bf16_questions)
        self._bf16_questions: tuple[Any, list[nn.Module]] | None = None
        self._bf16_passages: tuple[Any, list[nn.Module]] | None = None
        if config.question_encoder is QuestionEncoderKind.SHARED:
            self.q_start_head: nn.Module = identity_linear(d)
            self.q_end_head: nn.Module = identity_linear(d)
        else:
            self.q_start_head = nn.Identity()
            self.q_end_head = nn.Identity()

    # --- construction ---------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        name: str | Path,
        *,
        question_encoder: QuestionEncoderKind | str = QuestionEncoderKind.SHARED,
        question_pooling: Pooling | str | None = None,
        cache_dir: Path | None = None,
        **settings: Any,
    ) -> PhraseEncoder:
        """A saved phrase model, or a new one initialised from any encoder anygrain can load
        (alias, hub name or directory).  ``settings`` fill :class:`PhraseConfig` fields."""
        saved = _saved_phrase_dir(name)
        if saved is not None:
            # continued training: a saved or packed phrase model (or a shipped one's name)
            # goes on as it is; settings that would change what it computes are refused
            model = cls.load(saved)
            wanted = {"question_encoder": QuestionEncoderKind(question_encoder), **settings}
            if question_pooling is not None:
                wanted["question_pooling"] = Pooling(question_pooling)
            differ = [
                f"{k} {getattr(model.config, k)!r} (asked: {v!r})"
                for k, v in wanted.items()
                if hasattr(model.config, k) and getattr(model.config, k) != v
            ]
            if differ:
                raise AnygrainError(
                    f"{saved}: this phrase model was made with other settings: " + "; ".join(differ)
                )
            return model
        path, defaults = resolve_model(name, cache_dir=cache_dir)
        base, tok = load_hf_dir(path)
        kind = QuestionEncoderKind(question_encoder)
        pooling = Pooling(question_pooling or defaults.pooling)
        cfg = PhraseConfig(
            base_model=str(name),
            hidden_size=int(base.config.hidden_size),
            question_encoder=kind,
            question_pooling=pooling,
            query_prefix=defaults.query_prefix,
            passage_prefix=defaults.passage_prefix,
            lang=defaults.lang,
        )
        for k, v in settings.items():
            if not hasattr(cfg, k):
                raise AnygrainError(f"unknown phrase model setting {k!r}")
            setattr(cfg, k, v)
        n_q = 2 if kind is QuestionEncoderKind.SEPARATE else 1
        questions = [copy.deepcopy(base) for _ in range(n_q)]
        return cls(cfg, base, tok, questions)

    def question_dirs(self) -> list[str]:
        """The names the question encoders are saved (and packed) under, in order."""
        if self.config.question_encoder is QuestionEncoderKind.SEPARATE:
            return ["question_start", "question_end"]
        return ["question"]

    @classmethod
    def from_saved(cls, path: Path, config: dict[str, Any]) -> PhraseEncoder:
        """The full saved form (the packed one loads through :mod:`anygrain.phrase.packed`)."""
        cfg = PhraseConfig.from_dict(config, str(path / MODEL_CONFIG))
        phrase, tok = load_hf_dir(path / "phrase")
        if int(phrase.config.hidden_size) != cfg.hidden_size:
            raise AnygrainError(
                f"{path}: phrase encoder has hidden size {phrase.config.hidden_size}, "
                f"config says {cfg.hidden_size}"
            )
        names = (
            ["question_start", "question_end"]
            if cfg.question_encoder is QuestionEncoderKind.SEPARATE
            else ["question"]
        )
        questions = [load_hf_dir(path / n)[0] for n in names]
        model = cls(cfg, phrase, tok, questions)
        heads = path / HEADS_FILE
        if not heads.exists():
            raise AnygrainError(f"{path}: missing {HEADS_FILE}")
        state = load_tensors(heads)
        try:
            model.head_modules().load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise AnygrainError(f"{heads}: heads do not fit the model ({e})") from None
        model.eval()
        return model

    def parameter_sides(self) -> dict[str, list[nn.Parameter]]:
        """Trainable parameters by side: ``phrase`` (encoder, start/end heads, filter) and
        ``question``; together they are ``parameters()`` in the same order."""
        phrase = [self.phrase, self.start_head, self.end_head, self.filter]
        question = [self.questions, self.q_start_head, self.q_end_head]
        return {
            "phrase": [p for m in phrase for p in m.parameters()],
            "question": [p for m in question for p in m.parameters()],
        }

    def encoders(self) -> list[nn.Module]:
        """The transformer encoders: phrase first, then the question encoder(s)."""
        return [self.phrase, *self.questions]

    def freeze_embeddings(self) -> None:
        """Stop training every encoder's embedding layer (token, position, type, norm)."""
        for enc in self.encoders():
            emb = getattr(enc, "embeddings", None) or enc.get_input_embeddings()  # type: ignore[operator]
            for p in emb.parameters():
                p.requires_grad_(False)

    def head_modules(self) -> nn.ModuleDict:
        return nn.ModuleDict(
            {
                "start_head": self.start_head,
                "end_head": self.end_head,
                "filter": self.filter,
                "q_start_head": self.q_start_head,
                "q_end_head": self.q_end_head,
            }
        )

    def save(self, path: str | Path) -> Path:
        """Write the model into ``path`` (created if needed; other files there are kept,
        as a training run's checkpoints are): :meth:`save_into`.  A model unpacked from a
        packed one and unchanged since is written in the packed form again."""
        from anygrain.phrase import packed

        path = Path(path)
        if (
            self.packed is not None
            and packed.full_fingerprint(self) == self.packed.full_fingerprint
        ):
            packed.copy_packed(self.packed, path)
            return path
        with quiet_transformers():
            return self.save_into(path)

    def write_weights(self, directory: Path) -> None:
        from safetensors.torch import save_file

        self.phrase.save_pretrained(str(directory / "phrase"))  # type: ignore[operator]
        self.tokenizer.save_pretrained(str(directory / "phrase"))
        for name, m in zip(self.question_dirs(), self.questions, strict=True):
            m.save_pretrained(str(directory / name))  # type: ignore[operator]
            self.tokenizer.save_pretrained(str(directory / name))
        state = {k: v.detach().contiguous() for k, v in self.head_modules().state_dict().items()}
        save_file(state, str(directory / HEADS_FILE))

    def owned_names(self) -> Sequence[str]:
        from anygrain.phrase.packed import PACKED_NAMES

        # a full save over a packed model removes the packed files
        return ("phrase", "question", "question_start", "question_end", HEADS_FILE, *PACKED_NAMES)

    def fingerprinted_modules(self) -> Sequence[nn.Module]:
        return [self.phrase, self.start_head, self.end_head, self.filter]

    def phrase_fingerprint(self) -> str:
        """Fingerprint of everything that makes phrase vectors (and filter logits): what a
        phrase index records."""
        return self.fingerprint()

    @property
    def dim(self) -> int:
        return self.config.hidden_size

    @property
    def device(self) -> torch.device:
        """Where the weights are (``model.to(device)`` moves them; inputs follow)."""
        return module_device(self.phrase)

    # --- differentiable forward passes ------------------------------------------------
    def phrase_forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(start, end, filter_logits)``: (B, T, d), (B, T, d), (B, T, 2)."""
        return self.phrase_forward_with(
            self.passage_modules, input_ids, attention_mask, token_type_ids
        )

    @property
    def passage_modules(self) -> list[nn.Module]:
        """What encodes passages: the passage encoder and its start, end and filter heads."""
        return [self.phrase, self.start_head, self.end_head, self.filter]

    def phrase_forward_with(
        self,
        modules: Sequence[nn.Module],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`phrase_forward` with ``modules`` standing in for the passage encoder and its
        start, end and filter heads (their :meth:`bf16_passages` copies)."""
        phrase, start, end, filt = modules
        kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        h = phrase(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
        return start(h), end(h), filt(h)

    def question_forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_start, q_end)``, each (B, d)."""
        return self.question_forward_with(self.questions, input_ids, attention_mask, token_type_ids)

    def question_forward_with(
        self,
        encs: Sequence[nn.Module] | nn.ModuleList,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        token_embeds: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`question_forward` with ``encs`` standing in for the question encoders
        (their :meth:`bf16_questions` copies).  ``token_embeds`` (B, L, width): the rows of
        :meth:`question_token_table` for the tokens, in place of ``input_ids``."""
        kw = encoder_inputs(input_ids, attention_mask, token_type_ids, token_embeds)
        if self.config.question_encoder is QuestionEncoderKind.SEPARATE:
            outs = [m(**kw).last_hidden_state[:, 0] for m in encs]
            return outs[0], outs[1]
        h = encs[0](**kw).last_hidden_state
        pooled = pool(h, attention_mask, self.config.question_pooling)
        return self.q_start_head(pooled), self.q_end_head(pooled)

    def question_token_table(self) -> torch.Tensor | None:
        """The token-embedding table every question encoder looks tokens up in, when they
        share one (frozen embeddings: the backbone's), else None."""
        tables = [m.get_input_embeddings().weight for m in self.questions]  # type: ignore[operator]
        first = tables[0]
        if all(t.data_ptr() == first.data_ptr() or torch.equal(t, first) for t in tables[1:]):
            return first
        return None

    # --- tokenization ----------------------------------------------------------------
    def tokenize_questions(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        with TOKENIZING:
            enc = self.tokenizer(
                [self.config.query_prefix + t for t in texts],
                truncation=True,
                max_length=self.config.max_query_length,
                padding=True,
                return_tensors="pt",
            )
        return {
            k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")
        }

    def windows(self, texts: Sequence[str], titles: Sequence[str] | None = None) -> list[Window]:
        """Passages as token windows, as this model was trained to read them."""
        c = self.config
        with TOKENIZING:
            return tokenize_windows(
                self.tokenizer,
                texts,
                titles if c.include_title else None,
                max_length=c.max_passage_length,
                stride=c.doc_stride,
                prefix=c.passage_prefix,
            )

    def collate(self, windows: Sequence[Window]) -> dict[str, torch.Tensor]:
        """Pad windows into a batch of tensors."""
        width = max(len(w) for w in windows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(windows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(windows), width), dtype=torch.long)
        types = torch.zeros((len(windows), width), dtype=torch.long)
        has_types = windows[0].token_type_ids is not None
        for r, w in enumerate(windows):
            n = len(w)
            ids[r, :n] = torch.from_numpy(w.input_ids)
            mask[r, :n] = 1
            if w.token_type_ids is not None:
                types[r, :n] = torch.from_numpy(w.token_type_ids)
        out = {"input_ids": ids, "attention_mask": mask}
        if has_types:
            out["token_type_ids"] = types
        return out

    # --- inference ---------------------------------------------------------------------
    @torch.inference_mode()
    def encode_questions(
        self, texts: Sequence[str], *, batch_size: int = 64, bf16: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(q_start, q_end)`` float32 arrays, input order; batches by length to save padding."""
        # eval() walks every submodule, a cost per search call: only when the model
        # or one of its parts (train() reaches every descendant of a part) is training
        if self.training or any(m.training for m in self.children()):
            self.eval()
        n = len(texts)
        qs = np.zeros((n, self.dim), dtype=np.float32)
        qe = np.zeros((n, self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        dev = self.device
        # on a CPU, bf16 runs the linear layers from weights cast once (bf16_questions);
        # autocast would cast them again on every call
        cpu_bf16 = bf16 and dev.type == "cpu"
        encoders = self.bf16_questions() if cpu_bf16 else self.questions
        for i in range(0, n, batch_size):
            b = order[i : i + batch_size]
            enc = {k: v.to(dev) for k, v in self.tokenize_questions([texts[j] for j in b]).items()}
            with autocast(dev, bf16 and not cpu_bf16):
                s, e = self.question_forward_with(
                    encoders, enc["input_ids"], enc["attention_mask"], enc.get("token_type_ids")
                )
            qs[b], qe[b] = s.float().cpu().numpy(), e.float().cpu().numpy()
        name = self.config.base_model
        return check_finite(qs, name, "question start"), check_finite(qe, name, "question end")

    def bf16_questions(self) -> list[nn.Module]:
        """The question encoders with bfloat16 linear layers (:func:`bf16_linears`), for
        CPU inference: made at first use, made again once the weights have changed."""
        version = weights_version(self.questions)
        if self._bf16_questions is None or self._bf16_questions[0] != version:
            self._bf16_questions = (version, [bf16_linears(m) for m in self.questions])
        return self._bf16_questions[1]

    def bf16_passages(self) -> list[nn.Module]:
        """The passage encoder and its heads wholly in bfloat16 (weights and activations),
        for CPU inference: made at first use and again once the weights have changed.  Faster
        than autocast on a CPU (attention, GELU and the casts between layers run in bfloat16
        too), its token vectors within bfloat16's rounding of float32's."""
        mods = self.passage_modules
        version = [weights_version(m) for m in mods]
        if self._bf16_passages is None or self._bf16_passages[0] != version:
            copies = [copy.deepcopy(m).to(torch.bfloat16).eval() for m in mods]
            self._bf16_passages = (version, copies)
        return self._bf16_passages[1]

    @property
    def model_name(self) -> str:
        return self.config.base_model

    def window_forward(self, *, bf16: bool, cast_once: bool) -> WindowForward:
        """What encodes a batch of windows for :meth:`encode_passages`
        (:class:`~anygrain.phrase.passages.PassageEncoding`'s), on the model's device.
        ``cast_once`` with ``bf16`` on a CPU runs a copy of the encoder cast to bfloat16 once
        (:meth:`bf16_passages`) instead of autocast, which casts the weights on every call
        and keeps attention in float32: what re-scoring's few passages run (a build's dump
        keeps autocast, which its recorded ``bf16`` means)."""
        if any(m.training for m in self.passage_modules):  # eval() walks every module
            self.eval()
        dev = self.device
        cast = cast_once and bf16 and dev.type == "cpu"
        modules = self.bf16_passages() if cast else self.passage_modules

        @torch.inference_mode()
        def forward(windows: Sequence[Window]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            batch = {k: v.to(dev) for k, v in self.collate(windows).items()}
            with autocast(dev, bf16 and not cast):
                ts, te, tf = self.phrase_forward_with(
                    modules,
                    batch["input_ids"],
                    batch["attention_mask"],
                    batch.get("token_type_ids"),
                )
            return ts.float().cpu().numpy(), te.float().cpu().numpy(), tf.float().cpu().numpy()

        return forward
