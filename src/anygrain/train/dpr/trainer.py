"""DPR training: full bi-encoder fine-tuning, or query-side against frozen passage vectors.

FULL trains both encoders on DPR's loss (in-batch negatives plus BM25 hard
negatives) with AdamW, linear warm-up and decay, and gradient clipping; batches
can be any size with gradient caching.  QUERY_SIDE, the cheap path of the phrase
retrieval papers, encodes the training corpus once with the frozen passage
encoder and trains only the question encoder with a softmax over every cached
passage; the passage weights stay byte-identical to the base model's, so an
index built with the base model still fits the trained one.

Runs are reproducible and restartable: the data order comes from the seed, and a
checkpoint (weights, optimizer, scheduler, RNG, position) is written every
``checkpoint_every`` steps, at the end of every epoch and on Ctrl-C; a rerun
continues from the last one and ends with the same weights as an uninterrupted run.

``device`` picks where it trains (auto: a CUDA GPU when torch sees one); a missing GPU
is refused before any data is read.  Batches are built on the CPU and moved there, and
checkpoints load on any device (a run may resume on another one).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anygrain.corpus.store import CorpusStore
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.models.biencoder import MODEL_CONFIG, BiEncoder
from anygrain.models.encoder import TextEncoder
from anygrain.train.checkpoint import (
    check_compatible,
    load_checkpoint,
    run_identity,
    save_checkpoint,
)
from anygrain.train.dpr.batching import tokenize
from anygrain.train.dpr.config import DprTrainConfig, TrainMode
from anygrain.train.dpr.data import (
    Ctx,
    Supervision,
    TrainExample,
    TrainingData,
    load_training_data,
    mine_bm25_hard_negatives,
)
from anygrain.train.dpr.grad_cache import Side, backward_grad_cache, backward_plain
from anygrain.train.dpr.losses import dpr_nll, false_negative_mask, full_softmax_nll
from anygrain.train.dpr.passage_cache import cache_key, cached_passage_vectors
from anygrain.train.loop import EpochTrainer, LoopSettings, StepCallback, StepResult, run_loop
from anygrain.train.optim import param_groups
from anygrain.train.run_dir import RunDir
from anygrain.train.runlog import defer_sigint
from anygrain.utils.device import resolve_device
from anygrain.utils.threads import set_threads

CACHE_DIR = "cache"


# --- model -----------------------------------------------------------------------------
def load_model(config: DprTrainConfig) -> BiEncoder:
    """The starting bi-encoder; QUERY_SIDE gets its own copy of the question encoder."""
    shared = config.shared and config.mode is TrainMode.FULL
    model = BiEncoder.from_pretrained(
        config.model,
        shared=shared,
        max_query_length=config.max_query_length,
        max_passage_length=config.max_passage_length,
    )
    # An anygrain model directory keeps its own lengths; the run's settings win.
    model.question.config.max_length = config.max_query_length
    model.passage.config.max_length = config.max_passage_length
    if model.config.shared and not shared:
        untie(model)
    return model


def untie(model: BiEncoder) -> None:
    """Give the question side its own weights; the passage side keeps the originals."""
    q = model.question
    model.question = TextEncoder(copy.deepcopy(q.model), q.tokenizer, q.config)
    model.config.shared = False


# --- small helpers ---------------------------------------------------------------------------


def _temperature(config: DprTrainConfig, model: BiEncoder) -> float:
    if config.temperature is not None:
        return config.temperature
    return 0.05 if model.question.config.normalize else 1.0


def _cuda_rng(device: torch.device) -> torch.Tensor | None:
    """The GPU generator's state (dropout on a GPU draws from it); None on the CPU."""
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else None


# --- the trainer -------------------------------------------------------------------------------
class _Trainer(EpochTrainer):
    def __init__(
        self,
        config: DprTrainConfig,
        model: BiEncoder,
        data: TrainingData,
        run: RunDir,
    ) -> None:
        self.cfg = config
        self.model = model
        self.data = data
        self.out, self.log = run.out, run.log
        self.progress = run.progress
        self.device = resolve_device(config.device)
        model.to(self.device)
        self.scale = 1.0 / _temperature(config, model)
        self.examples: list[TrainExample] = data.examples
        self.data_fingerprint = data.fingerprint()
        self.passage_vecs: torch.Tensor | None = None
        self.row_of: dict[str, int] = {}
        if config.mode is TrainMode.QUERY_SIDE:
            for p in model.passage.parameters():
                p.requires_grad_(False)
            self.trainable: torch.nn.Module = model.question
        else:
            self.trainable = model
        n = len(self.examples)
        self.steps_per_epoch = math.ceil(n / config.batch_size)
        self.total_steps = self.steps_per_epoch * config.epochs
        self.optimizer = torch.optim.AdamW(
            param_groups(self.trainable, config.weight_decay), lr=config.lr
        )
        from transformers import get_linear_schedule_with_warmup

        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, int(config.warmup_ratio * self.total_steps), self.total_steps
        )
        self.epoch = 0
        self.step_in_epoch = 0
        self.global_step = 0
        # The RNG as of the last completed update: a checkpoint taken after an
        # interrupted forward pass must not record the dropout draws of that pass.
        self.rng_state = torch.get_rng_state()
        self.cuda_rng_state = _cuda_rng(self.device)
        self.params: list[torch.nn.Parameter] = []

    # -- preparation ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        if self.cfg.mode is TrainMode.FULL:
            self._mine()
        else:
            self._cache_passages()

    def _mine(self) -> None:
        missing = sum(1 for ex in self.examples if not ex.hard_negatives)
        if self.cfg.hard_negatives < 1 or not missing:
            return
        from anygrain.index.base import Index
        from anygrain.sparse.bm25 import BM25Index

        fp = self.data.pool.fingerprint()
        cache = self.out / CACHE_DIR
        corpus_dir, bm25_dir = cache / f"corpus-{fp}", cache / f"bm25-{fp}"
        store = (
            CorpusStore(corpus_dir)
            if (corpus_dir / "corpus.json").exists()
            else CorpusStore.build(self.data.pool.documents(), corpus_dir, progress=self.progress)
        )
        try:
            index = Index.load(bm25_dir, store=store)
        except AnygrainError:
            # our own cache: one that does not open (damaged, half-written) is rebuilt
            index = BM25Index.build_from(store, bm25_dir, progress=self.progress, overwrite=True)
        self.examples, report = mine_bm25_hard_negatives(
            self.examples,
            store,
            index,
            n=self.cfg.hard_negatives,
            depth=self.cfg.bm25_depth,
            progress=self.progress,
        )
        self.log.say(
            report.summary(), self.global_step, mined=report.mined, without=report.n_without
        )

    def _cache_passages(self) -> None:
        pool = self.data.pool
        ids = pool.ids()
        self.row_of = {pid: i for i, pid in enumerate(ids)}
        titles = [pool.passages[i][1] for i in ids]
        texts = [pool.passages[i][2] for i in ids]
        key = cache_key(
            self.model, pool.fingerprint(), include_title=self.cfg.include_title, bf16=self.cfg.bf16
        )
        t0 = time.time()
        vecs = cached_passage_vectors(
            self.model,
            titles,
            texts,
            self.out / CACHE_DIR,
            key,
            include_title=self.cfg.include_title,
            batch_size=self.cfg.encode_batch_size,
            bf16=self.cfg.bf16,
            progress=self.progress,
        )
        self.passage_vecs = torch.from_numpy(np.array(vecs, dtype=np.float32)).to(self.device)
        self.log.say(
            f"{len(ids)} passage vectors ready ({time.time() - t0:.1f}s)",
            self.global_step,
            passages=len(ids),
        )

    # -- checkpoints ---------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        weights = {"question": self.model.question.state_dict()}
        if self.cfg.mode is TrainMode.FULL and not self.model.config.shared:
            weights["passage"] = self.model.passage.state_dict()
        return {
            **run_identity(self.cfg.trajectory(), self.data_fingerprint),
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "weights": weights,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": self.rng_state,
            # a GPU run's dropout state; ignored when the run resumes on the CPU
            **({"cuda_rng": self.cuda_rng_state} if self.cuda_rng_state is not None else {}),
        }

    def save_checkpoint(self) -> Path:
        with defer_sigint():
            return save_checkpoint(self.out, self._state(), global_step=self.global_step)

    def resume_from(self, path: Path) -> None:
        state = load_checkpoint(path)
        check_compatible(
            state,
            json.loads(json.dumps(self.cfg.trajectory(), sort_keys=True)),
            self.data_fingerprint,
            path,
        )
        self.model.question.load_state_dict(state["weights"]["question"])
        if "passage" in state["weights"]:
            self.model.passage.load_state_dict(state["weights"]["passage"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.rng_state = state["torch_rng"]
        if self.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
            self.cuda_rng_state = state["cuda_rng"]
        self.epoch, self.step_in_epoch = int(state["epoch"]), int(state["step_in_epoch"])
        self.global_step = int(state["global_step"])

    # -- one step ---------------------------------------------------------------------------------------
    def batch_rows(self, epoch: int, step: int) -> np.ndarray:
        """The examples of a step: a per-epoch permutation from the seed, independent of restarts."""
        perm = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.examples))
        return perm[step * self.cfg.batch_size : (step + 1) * self.cfg.batch_size]

    def _backward(self, sides: list[Side], loss_fn: Callable[..., torch.Tensor]) -> float:
        run = backward_grad_cache if self.cfg.grad_cache else backward_plain
        return run(sides, loss_fn, chunk_size=self.cfg.grad_cache_chunk, bf16=self.cfg.bf16)

    def step_loss(self, epoch: int, step: int) -> float:
        """Forward and backward one batch; returns its loss (gradients left in ``.grad``)."""
        exs = [self.examples[i] for i in self.batch_rows(epoch, step)]
        dev = self.device
        q_tok = tokenize(self.model.question, [ex.question for ex in exs])
        if self.cfg.mode is TrainMode.QUERY_SIDE:
            assert self.passage_vecs is not None
            target = torch.tensor([self.row_of[ex.positive[0]] for ex in exs], device=dev)
            vecs = self.passage_vecs
            return self._backward(
                [Side(self.model.question, q_tok)],
                lambda q: full_softmax_nll(q, vecs, target, scale=self.scale),
            )
        rng = np.random.default_rng([self.cfg.seed, epoch, step])
        negs: list[Ctx] = []
        for ex in exs:
            hn = ex.hard_negatives
            k = min(self.cfg.hard_negatives, len(hn))
            # DPR shuffles each question's hard negatives and takes the first ones.
            negs.extend(hn[j] for j in (rng.permutation(len(hn))[:k] if len(hn) > k else range(k)))
        ctxs = [ex.positive for ex in exs] + negs
        p_tok = tokenize(
            self.model.passage,
            [c[2] for c in ctxs],
            [c[1] for c in ctxs] if self.cfg.include_title else None,
        )
        exclude = false_negative_mask(
            [ex.positive[0] for ex in exs], [c[0] for c in ctxs], [ex.relevant for ex in exs]
        )
        if exclude is not None:
            exclude = exclude.to(dev)
        b = len(exs)
        return self._backward(
            [Side(self.model.question, q_tok), Side(self.model.passage, p_tok)],
            lambda q, p: dpr_nll(q, p[:b], p[b:], scale=self.scale, exclude=exclude),
        )

    # -- the loop --------------------------------------------------------------------------------------
    def train_step(self) -> StepResult:
        epoch, step = self.epoch, self.step_in_epoch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.step_loss(epoch, step)
        n_ex = len(self.batch_rows(epoch, step))
        end_of_epoch = self.update()
        return StepResult({"loss": loss}, n_ex, end_of_epoch)

    def count_update(self, steps_this_epoch: int) -> bool:
        end_of_epoch = super().count_update(steps_this_epoch)
        self.cuda_rng_state = _cuda_rng(self.device)
        return end_of_epoch

    # -- the loop --------------------------------------------------------------------------------------
    def run(self, on_step: StepCallback | None = None) -> dict[str, Any]:
        self.params = [p for p in self.trainable.parameters() if p.requires_grad]
        self.model.train()
        if self.cfg.mode is TrainMode.QUERY_SIDE:
            self.model.passage.eval()
        self.rng_state = torch.get_rng_state()
        self.cuda_rng_state = _cuda_rng(self.device)
        settings = LoopSettings(
            items="examples",
            log_every=self.cfg.log_every,
            checkpoint_every=self.cfg.checkpoint_every,
            progress=self.progress,
        )
        return run_loop(self, self.log, settings, on_step=on_step).as_dict("examples")


def train_dpr(
    config: DprTrainConfig,
    *,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
    on_step: StepCallback | None = None,
) -> Path:
    """Train a DPR bi-encoder into ``config.out``; returns that directory.

    The directory ends up holding the model (``BiEncoder.load``-able),
    ``train_config.json`` and ``train_log.jsonl``, plus ``cache/`` (training corpus,
    BM25, cached passage vectors) reused by reruns.  With ``resume`` a run continues
    from its last checkpoint, and a finished run is not repeated.  ``on_step`` is
    called with the global step after every update (tests use it to interrupt).
    """
    config.validate()
    resolve_device(config.device)  # a missing GPU is refused before any data is read
    set_threads(config.threads)
    run = RunDir(config.out, config, progress=progress)
    log, out = run.log, run.out
    data = load_training_data(
        config.train,
        errors=errors,
        max_examples=config.max_examples,
        seed=config.seed,
        corpora=config.corpus,
        id_prefixes=config.id_prefix,
    )
    fingerprint = data.fingerprint()
    if run.already_trained(MODEL_CONFIG, fingerprint, resume=resume):
        return out
    torch.manual_seed(config.seed)
    model = load_model(config)
    if config.mode is TrainMode.QUERY_SIDE:
        base_fingerprint = model.passage_fingerprint()
    trainer = _Trainer(config, model, data, run)
    ckpt = run.open(resume=resume)
    if ckpt is None:
        run.start(
            mode=config.mode.value,
            examples=len(data.examples),
            passages=len(data.pool),
            dropped=data.dropped,
            supervision={
                how.value: sum(1 for ex in data.examples if ex.supervision is how)
                for how in Supervision
            },
            batch_size=config.batch_size,
            in_batch_negatives=config.batch_size - 1,
            hard_negatives_per_question=config.hard_negatives,
            steps_per_epoch=trainer.steps_per_epoch,
            total_steps=trainer.total_steps,
            temperature=1.0 / trainer.scale,
            device=str(trainer.device),
        )
        by = {how: sum(1 for ex in data.examples if ex.supervision is how) for how in Supervision}
        log.say(
            f"{len(data.examples)} examples ({by[Supervision.QRELS]} with judged positives, "
            f"{by[Supervision.ANSWERS]} with answer positives); batch {config.batch_size}: "
            f"{config.batch_size - 1} in-batch negatives and up to {config.hard_negatives} "
            "BM25 hard negative(s) per question (each question's softmax also sees the "
            "batch's other hard negatives)",
            0,
        )
    trainer.prepare()
    if ckpt is not None:
        trainer.resume_from(ckpt)
        run.resumed(ckpt, trainer.global_step)
    stats = trainer.run(on_step)
    if config.mode is TrainMode.QUERY_SIDE and model.passage_fingerprint() != base_fingerprint:
        raise AnygrainError("internal error: query-side training changed the passage encoder")
    model.save_into(out)  # config last; an earlier save's encoder directories go
    run.finish(
        trainer.global_step,
        fingerprint,
        keep_checkpoints=config.keep_checkpoints,
        passage_fingerprint=model.passage_fingerprint(),
        **stats,
    )
    return out
