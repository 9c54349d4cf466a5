"""Reader training (DPR section 6): span marginal likelihood + passage selection.

Each step takes ``batch_size`` questions; each question is read with its positive
passage (the gold paragraph of SQuAD-format data) and ``negatives`` (``m - 1``;
DPR uses m = 24, the CPU default here is 8 passages in all) negative passages:

* with a retriever index, negatives are sampled afresh each step from the
  question's top ``retriever_depth`` hits that do not contain an answer
  (:func:`anygrain.eval.answers.has_answer`) and are not the positive, as DPR
  samples from its retriever's top 100;
* without one (or when too few retrieved passages qualify), they are other
  paragraphs of the *same file*: paragraphs of the same article first (on the
  same topic, so harder, like retrieved ones), then any paragraph of the file,
  again skipping those that contain an answer.

The loss is the marginal log-likelihood of *all* gold-answer spans in the
positive (``-log sum P_start(s) P_end(e)`` over every occurrence of every gold
answer) plus the cross-entropy of the positive under the selection softmax over
the question's passages.  A long positive is read in the window (max_length
tokens, ``stride`` overlap) that holds its annotated answer; a negative in its
first window.

AdamW, linear warm-up and decay, gradient clipping and optional bf16 autocast.
Runs are reproducible and restartable: data order and negatives come from the
seed, a checkpoint (weights, optimizer, scheduler, RNG, position) is written
every ``checkpoint_every`` steps, at the end of each epoch and on Ctrl-C, and a
rerun continues from the last one to the same final weights as an
uninterrupted run.

With a ``teacher`` (a trained reader with the same tokenizer) the student also learns the
teacher's start, end and selection scores on the same windows (``distill`` weighs them);
``layers`` starts the student from a few of the starting model's layers, so a smaller,
faster reader learns from a larger one.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anygrain.corpus.lang import text_languages
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.eval.answers import AnswerMatcher
from anygrain.models.shipped import saved_model_dir
from anygrain.reader.features import Batch, Window, collate, make_windows
from anygrain.reader.losses import (
    hidden_distillation,
    selection_bce,
    selection_distillation,
    selection_nll,
    span_distillation,
    span_marginal_nll,
)
from anygrain.reader.model import READER_CONFIG, Reader, ReaderOutput, evenly_spaced
from anygrain.train.budget import TimeBudget, fitted_total, linear_schedule
from anygrain.train.checkpoint import (
    check_compatible,
    checkpoint_format,
    load_checkpoint,
    save_checkpoint,
)
from anygrain.train.loop import EpochTrainer, LoopSettings, StepCallback, StepResult, run_loop
from anygrain.train.optim import param_groups
from anygrain.train.reader.config import ReaderTrainConfig
from anygrain.train.reader.data import ReaderData, ReaderExample, load_reader_data
from anygrain.train.reader.retrieval import attach_retrieved
from anygrain.train.run_dir import RunDir
from anygrain.train.runlog import TrainLog, defer_sigint
from anygrain.utils.device import autocast, resolve_device
from anygrain.utils.threads import set_threads

__all__ = ["ReaderTrainer", "StepBatch", "load_teacher", "train_reader"]

CHECKPOINT_FORMAT = checkpoint_format("reader")


# --- checkpoints and small helpers -------------------------------------------------------------
@dataclass
class StepBatch:
    """The model input of one step: windows, where each question's passages sit, gold spans."""

    windows: list[Window]
    batch: Batch  # all windows collated (masks; inputs for inspection)
    layout: torch.Tensor  # [B, m] window row of each passage (positive first), -1 when absent
    gold_starts: torch.Tensor  # [B, G]
    gold_ends: torch.Tensor  # [B, G]
    gold_mask: torch.Tensor  # [B, G]

    @property
    def n_questions(self) -> int:
        return int(self.layout.shape[0])


def load_teacher(name: str) -> Reader:
    """A trained reader to distil from, frozen in eval mode (a directory or a shipped name)."""
    path = saved_model_dir(name)
    if not path.joinpath(READER_CONFIG).exists():
        raise AnygrainError(
            f"--teacher {name}: not a trained reader (a reader directory or a shipped "
            "reader's name)"
        )
    teacher = Reader.load(path)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def check_same_tokenizer(teacher: Reader, student: Reader, name: str) -> None:
    """Distillation compares scores token by token: both must cut text the same way."""
    if teacher.tokenizer.get_vocab() != student.tokenizer.get_vocab():
        raise AnygrainError(
            f"--teacher {name}: its tokenizer differs from the student's; distil between "
            "readers on the same encoder family"
        )


def layer_count(reader: Reader) -> int:
    return int(reader.encoder.config.num_hidden_layers)  # type: ignore[union-attr, arg-type]


def check_same_width(teacher: Reader, student: Reader, name: str) -> None:
    """The hidden-state loss compares token vectors as they are (no projection)."""
    widths = [int(r.encoder.config.hidden_size) for r in (teacher, student)]  # type: ignore[union-attr, arg-type]
    if widths[0] != widths[1]:
        raise AnygrainError(
            f"--teacher {name}: its token vectors are {widths[0]} wide, the student's "
            f"{widths[1]}; --hidden-distill needs the same width"
        )


def run_fingerprint(data: ReaderData, teacher: Reader | None) -> str:
    """What the run learns from: the data, and the teacher's weights when there is one."""
    fp = data.fingerprint()
    return fp if teacher is None else f"{fp}+teacher:{teacher.fingerprint()}"


# --- the trainer ---------------------------------------------------------------------------------
class ReaderTrainer(EpochTrainer):
    """Holds the run's state; :meth:`run` trains, :meth:`step_batch` / :meth:`loss`
    expose one step (tests compare losses on a fixed batch)."""

    def __init__(
        self,
        config: ReaderTrainConfig,
        reader: Reader,
        data: ReaderData,
        out: Path,
        log: TrainLog,
        progress: bool,
        teacher: Reader | None = None,
    ) -> None:
        self.cfg = config
        self.reader = reader
        self.teacher = teacher
        self.data = data
        self.out = out
        self.log = log
        self.progress = progress
        self.device = resolve_device(config.device)
        reader.to(self.device)
        if teacher is not None:
            teacher.to(self.device)
        # the teacher layer each student layer learns from, with hidden_distill
        self.teacher_layers = (
            evenly_spaced(layer_count(reader), layer_count(teacher))
            if teacher is not None and config.hidden_distill > 0
            else None
        )
        self.data_fingerprint = run_fingerprint(data, teacher)
        self.steps_per_epoch = math.ceil(len(data.examples) / config.batch_size)
        self.planned_steps = self.steps_per_epoch * config.epochs
        self.fitted = False  # total_steps shrunk to a time budget (see fit_to_budget)
        self.set_total_steps(self.planned_steps)
        self.optimizer = torch.optim.AdamW(param_groups(reader, config.weight_decay), lr=config.lr)

        def schedule(step: int) -> float:
            return linear_schedule(step, self.warmup_steps, self.total_steps)

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.epoch = 0
        self.step_in_epoch = 0
        self.global_step = 0
        # The RNG as of the last completed update: a checkpoint taken after an
        # interrupted forward pass must not record that pass's dropout draws.
        self.rng_state = torch.get_rng_state()
        self.no_gold_windows = 0
        self.params: list[torch.nn.Parameter] = []

    def set_total_steps(self, n: int) -> None:
        """Train for ``n`` steps (at most the planned epochs); warm-up is a fraction of it."""
        self.total_steps = max(1, min(int(n), self.planned_steps))
        self.warmup_steps = max(1, int(self.cfg.warmup_ratio * self.total_steps))

    def fit_to_budget(self, seconds_per_step: float, seconds_left: float) -> bool:
        """Fit the schedule to end within ``seconds_left``; True when it changed."""
        before = self.total_steps
        self.fitted = True
        self.set_total_steps(fitted_total(self.global_step, seconds_per_step, seconds_left))
        return self.total_steps != before

    # -- data for one step ----------------------------------------------------------------------
    def batch_rows(self, epoch: int, step: int) -> np.ndarray:
        """A per-epoch permutation from the seed, independent of restarts."""
        perm = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.data.examples))
        return perm[step * self.cfg.batch_size : (step + 1) * self.cfg.batch_size]

    def sample_negatives(self, ex: ReaderExample, rng: np.random.Generator) -> list[int]:
        """``negatives`` passages for ``ex``: retrieved ones, then same-article, then same-file."""
        n = self.cfg.negatives
        out: list[int] = []
        if ex.retrieved:
            order = rng.permutation(len(ex.retrieved))[:n]
            out = [ex.retrieved[i] for i in order]
        if len(out) >= n:
            return out
        matcher = AnswerMatcher(ex.answers)
        taken = set(out) | {ex.positive}
        article = self.data.articles[ex.article]
        file = self.data.files[ex.file]
        cands = [article[i] for i in rng.permutation(len(article))]
        cands += [file[i] for i in rng.choice(len(file), min(len(file), 4 * n + 8), replace=False)]
        for c in cands:
            if len(out) >= n:
                break
            if c in taken:
                continue
            taken.add(c)
            if not matcher.in_text(self.data.texts[c]):
                out.append(c)
        return out

    def step_batch(self, epoch: int, step: int) -> StepBatch:
        cfg = self.cfg
        exs = [self.data.examples[i] for i in self.batch_rows(epoch, step)]
        rng = np.random.default_rng([cfg.seed, epoch, step])
        groups = [[ex.positive, *self.sample_negatives(ex, rng)] for ex in exs]
        pair_q: list[str] = []
        pair_p: list[int] = []
        for ex, g in zip(exs, groups, strict=True):
            pair_q += [ex.question] * len(g)
            pair_p += g
        windows = make_windows(
            self.reader.tokenizer,
            pair_q,
            [self.data.texts[p] for p in pair_p],
            [self.data.titles[p] for p in pair_p] if cfg.include_title else None,
            max_length=cfg.max_length,
            max_question_length=cfg.max_question_length,
            stride=cfg.stride,
        )
        per_pair: list[list[Window]] = [[] for _ in pair_p]
        for w in windows:
            per_pair[w.pair].append(w)
        chosen: list[Window] = []
        layout = torch.full((len(exs), cfg.negatives + 1), -1, dtype=torch.long)
        golds: list[list[tuple[int, int]]] = []
        pair = 0
        for b, (ex, g) in enumerate(zip(exs, groups, strict=True)):
            pos, spans = self._positive_window(ex, per_pair[pair])
            golds.append(spans)
            layout[b, 0] = len(chosen)
            chosen.append(pos)
            for j in range(1, len(g)):
                layout[b, j] = len(chosen)
                chosen.append(per_pair[pair + j][0])
            pair += len(g)
        n_gold = max(1, max(len(s) for s in golds))
        gs = torch.zeros((len(exs), n_gold), dtype=torch.long)
        ge = torch.zeros((len(exs), n_gold), dtype=torch.long)
        gm = torch.zeros((len(exs), n_gold), dtype=torch.bool)
        for b, spans in enumerate(golds):
            for j, (s, e) in enumerate(spans):
                gs[b, j], ge[b, j], gm[b, j] = s, e, True
        pad = self.reader.tokenizer.pad_token_id or 0
        return StepBatch(chosen, collate(chosen, pad), layout, gs, ge, gm)

    @staticmethod
    def _positive_window(
        ex: ReaderExample, windows: list[Window]
    ) -> tuple[Window, list[tuple[int, int]]]:
        """The window holding the annotated answer (else any gold span), with its gold token spans."""
        best: tuple[Window, list[tuple[int, int]]] | None = None
        for w in windows:
            spans = [t for t in (w.token_span(s, e) for s, e in ex.spans) if t is not None]
            if spans and w.token_span(*ex.spans[0]) is not None:
                return w, list(dict.fromkeys(spans))
            if spans and best is None:
                best = (w, list(dict.fromkeys(spans)))
        return best if best is not None else (windows[0], [])

    def forward(
        self, sb: StepBatch, model: Reader | None = None, hidden: bool = False
    ) -> ReaderOutput:
        """Run the windows through ``model`` (the reader trained) in length-sorted
        micro-batches (less padding, less memory) and return their logits in window order,
        padded to the longest window (``hidden``: every layer's token vectors too)."""
        model = model or self.reader
        n, width = sb.batch.input_ids.shape
        pad = self.reader.tokenizer.pad_token_id or 0
        order = sorted(range(n), key=lambda i: len(sb.windows[i]))
        parts: list[ReaderOutput] = []
        for c in range(0, n, self.cfg.micro_batch):
            b = collate([sb.windows[i] for i in order[c : c + self.cfg.micro_batch]], pad)
            with autocast(self.device, self.cfg.bf16):
                o = model(
                    **{k: v.to(self.device) for k, v in b.model_inputs().items()},
                    hidden_states=hidden,
                )
            extra = (0, width - o.start_logits.shape[1])
            parts.append(
                ReaderOutput(
                    torch.nn.functional.pad(o.start_logits.float(), extra),
                    torch.nn.functional.pad(o.end_logits.float(), extra),
                    o.selection_logits.float(),
                    None
                    if o.hidden is None
                    else tuple(torch.nn.functional.pad(h, (0, 0, *extra)) for h in o.hidden),
                )
            )
        inverse = torch.empty(n, dtype=torch.long, device=self.device)
        inverse[torch.tensor(order, dtype=torch.long, device=self.device)] = torch.arange(
            n, device=self.device
        )
        hiddens = [p.hidden for p in parts if p.hidden is not None]
        return ReaderOutput(
            torch.cat([p.start_logits for p in parts])[inverse],
            torch.cat([p.end_logits for p in parts])[inverse],
            torch.cat([p.selection_logits for p in parts])[inverse],
            tuple(torch.cat(layer)[inverse] for layer in zip(*hiddens, strict=True))
            if hiddens
            else None,
        )

    def loss(self, sb: StepBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean span loss (over questions with a gold span in their window) + mean selection loss."""
        o = self.forward(sb, hidden=self.teacher_layers is not None)
        dev = self.device
        layout = sb.layout.to(dev)
        pos = layout[:, 0]
        span = span_marginal_nll(
            o.start_logits[pos],
            o.end_logits[pos],
            sb.batch.passage.to(dev)[pos],
            sb.gold_starts.to(dev),
            sb.gold_ends.to(dev),
            sb.gold_mask.to(dev),
        )
        present = layout >= 0
        sel = selection_nll(o.selection_logits[layout.clamp(min=0)], present)
        n_gold = int(sb.gold_mask.any(dim=1).sum())
        span_loss = span.sum() / max(n_gold, 1)
        sel_loss = sel.mean()
        stats = {"selection_bce": 0.0, "distill": 0.0, "hidden_distill": 0.0}
        if self.cfg.selection_bce > 0:
            bce = selection_bce(o.selection_logits[layout.clamp(min=0)], present).mean()
            sel_loss = sel_loss + self.cfg.selection_bce * bce
            stats["selection_bce"] = float(bce.detach())
        total = span_loss + sel_loss
        if self.teacher is not None:
            kd, layer = self.distillation(sb, o)
            total = total + self.cfg.distill * kd + self.cfg.hidden_distill * layer
            stats["distill"] = float(kd.detach())
            stats["hidden_distill"] = float(layer.detach())
        return total, {
            **stats,
            "span_loss": float(span_loss.detach()),
            "selection_loss": float(sel_loss.detach()),
            "no_gold": sb.n_questions - n_gold,
        }

    def distillation(self, sb: StepBatch, o: ReaderOutput) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's soft targets on the step's windows: span KL on every window (what
        it would answer in negatives too) + soft selection labels per question; and, with
        ``hidden_distill``, the layer-wise hidden-state loss (else 0)."""
        assert self.teacher is not None
        with torch.no_grad():
            t = self.forward(sb, self.teacher, hidden=self.teacher_layers is not None)
        span = span_distillation(
            o.start_logits,
            o.end_logits,
            t.start_logits,
            t.end_logits,
            sb.batch.passage.to(self.device),
            self.cfg.temperature,
        )
        layout = sb.layout.to(self.device)
        rows = layout.clamp(min=0)
        sel = selection_distillation(
            o.selection_logits[rows], t.selection_logits[rows], layout >= 0
        )
        layer = torch.zeros((), device=self.device)
        if self.teacher_layers is not None:
            assert o.hidden is not None and t.hidden is not None
            layer = hidden_distillation(
                o.hidden, t.hidden, sb.batch.attention_mask, self.teacher_layers
            ).mean()
        return span.mean() + sel.mean(), layer

    # -- checkpoints ------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {
            "trajectory": json.dumps(self.cfg.trajectory(), sort_keys=True),
            "data_fingerprint": self.data_fingerprint,
            "global_step": self.global_step,
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "weights": self.reader.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": self.rng_state,
            "total_steps": self.total_steps,
            "fitted": self.fitted,
        }

    def save_checkpoint(self, keep: int = 2) -> Path:
        with defer_sigint():
            return save_checkpoint(
                self.out,
                self._state(),
                global_step=self.global_step,
                keep=keep,
                fmt=CHECKPOINT_FORMAT,
            )

    def resume_from(self, path: Path) -> None:
        state = load_checkpoint(path, fmt=CHECKPOINT_FORMAT)
        check_compatible(state, self.cfg.trajectory(), self.data_fingerprint, path)
        self.reader.load_state_dict(state["weights"])
        self.reader.to(self.device)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.rng_state = state["torch_rng"]
        self.epoch, self.step_in_epoch = int(state["epoch"]), int(state["step_in_epoch"])
        self.global_step = int(state["global_step"])
        if "total_steps" in state:  # a schedule fitted to a time budget stays fitted
            self.fitted = bool(state["fitted"])
            self.set_total_steps(int(state["total_steps"]))

    # -- the loop ---------------------------------------------------------------------------------
    def train_step(self) -> StepResult:
        epoch, step = self.epoch, self.step_in_epoch
        sb = self.step_batch(epoch, step)
        self.optimizer.zero_grad(set_to_none=True)
        loss, stats = self.loss(sb)
        loss.backward()
        end_of_epoch = self.update()
        self.no_gold_windows += int(stats["no_gold"])
        values = {
            "loss": float(loss.detach()),
            "span_loss": stats["span_loss"],
            "selection_loss": stats["selection_loss"],
            "selection_bce": stats["selection_bce"],
        }
        if self.teacher is not None:
            values["distill"] = stats["distill"]
        if self.teacher_layers is not None:
            values["hidden_distill"] = stats["hidden_distill"]
        return StepResult(values, sb.n_questions, end_of_epoch)

    # -- the loop ---------------------------------------------------------------------------------
    def run(
        self, on_step: StepCallback | None = None, t_origin: float | None = None
    ) -> tuple[dict[str, Any], str]:
        """Train to the end or the budget; the stats and why it stopped early ("" if not).
        Ctrl-C leaves a checkpoint *and* a usable reader in ``out``."""
        self.params = [p for p in self.reader.parameters() if p.requires_grad]
        self.reader.train()
        self.rng_state = torch.get_rng_state()
        settings = LoopSettings(
            desc="training reader",
            log_every=self.cfg.log_every,
            checkpoint_every=self.cfg.checkpoint_every,
            progress=self.progress,
        )
        budget = TimeBudget(self, self.cfg, self.log, t_origin or time.time())

        def save_reader() -> str:
            self.reader.eval()
            self.reader.to("cpu").save_into(self.out)
            return " and reader saved"

        loop = run_loop(
            self,
            self.log,
            settings,
            on_step=on_step,
            after_step=budget.after_step,
            should_stop=budget.should_stop,
            on_interrupt=save_reader,
        )
        stats = {**loop.as_dict("questions"), "positives_without_gold_span": self.no_gold_windows}
        return stats, loop.stopped


def train_reader(
    config: ReaderTrainConfig,
    *,
    retriever_index: Any | str | Path | None = None,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
    on_step: StepCallback | None = None,
) -> Path:
    """Train a reader into ``config.out`` and return that directory.

    ``retriever_index`` (an index or its directory) supplies DPR-style retrieved
    negatives; without it negatives come from the same file.  The directory ends
    up holding the reader (:meth:`Reader.load`-able), ``reader_train_config.json``
    and ``train_log.jsonl``.  With ``resume`` a run continues from its last
    checkpoint and a finished run is not repeated.  ``on_step`` is called with
    the global step after every update (tests use it to interrupt).
    """
    t0 = time.time()
    config.validate()
    set_threads(config.threads)
    run = RunDir(config.out, config, progress=progress)
    log, out = run.log, run.out
    data = load_reader_data(
        config.train, errors=errors, max_examples=config.max_examples, seed=config.seed
    )
    retrieval: dict[str, int] = {}
    if retriever_index is not None:
        if isinstance(retriever_index, str | Path):
            from anygrain.index.base import Index

            retriever_index = Index.load(retriever_index)
        retrieval = attach_retrieved(
            data, retriever_index, config.retriever_depth, progress=progress
        )
    teacher = load_teacher(config.teacher) if config.teacher else None  # distill > 0: validated
    fingerprint = run_fingerprint(data, teacher)
    if run.already_trained(READER_CONFIG, fingerprint, resume=resume):
        return out
    torch.manual_seed(config.seed)
    reader = Reader.from_pretrained(config.model, **config.reader_settings())
    if teacher is not None:
        check_same_tokenizer(teacher, reader, str(config.teacher))
        if config.hidden_distill > 0:
            check_same_width(teacher, reader, str(config.teacher))
    if config.layers is not None:
        reader.keep_layers(config.layers)
    if saved_model_dir(config.model).joinpath(READER_CONFIG).exists():
        # Continuing from a trained reader: the run's window settings win.
        for k, v in config.reader_settings().items():
            setattr(reader.config, k, v)
        reader.config.validate()
    # the corpus languages it is trained for: a reader it continues from keeps its own
    known = reader.config.languages or []
    reader.config.languages = list(dict.fromkeys([*known, *text_languages(data.texts)])) or None
    if config.freeze_embeddings:
        reader.freeze_embeddings()
    trainer = ReaderTrainer(config, reader, data, out, log, progress, teacher)
    ckpt = run.open(resume=resume)
    if ckpt is None:
        run.start(
            examples=len(data.examples),
            passages=len(data.texts),
            dropped=data.dropped,
            negatives_from="retriever" if retriever_index is not None else "same file",
            **retrieval,
            steps_per_epoch=trainer.steps_per_epoch,
            total_steps=trainer.total_steps,
        )
    else:
        trainer.resume_from(ckpt)
        run.resumed(ckpt, trainer.global_step)
    stats, stopped = trainer.run(on_step, t0)
    reader.eval()
    reader.to("cpu").save_into(out)  # anygrain_reader.json last
    if stopped:  # a usable reader now; a rerun continues the schedule from the checkpoint
        log.write({"event": "stopped", "step": trainer.global_step, "reason": stopped, **stats})
        return out
    run.finish(trainer.global_step, fingerprint, keep_checkpoints=config.keep_checkpoints, **stats)
    return out
