"""Training DensePhrases models (``anygrain train phrase``).

One step takes a batch of questions grouped by passage window, encodes each window
once and each question once, and minimises

    λ1·single + λ2·distill + λ3·negatives + λf·filter

(defaults 1, 2, 4, 1; see :mod:`anygrain.train.phrase.losses`).  Pre-batch negatives
switch on after ``pre_batch_from`` of the steps (the paper uses the last two of four
epochs), once the vectors have settled enough to be worth contrasting with.

The output directory is the model (``PhraseEncoder.load``-able), with
``train_config.json``, ``train_log.jsonl`` and ``checkpoints/``.  Checkpoints
(each epoch, every ``checkpoint_every`` steps, on Ctrl-C and when ``max_minutes``
runs out) hold weights, optimizer, scheduler, RNG and the pre-batch queue, so a
resumed run ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anygrain.errors import AnygrainError, ErrorLog
from anygrain.models.encoder import Pooling
from anygrain.phrase.model import MODEL_CONFIG, PhraseEncoder
from anygrain.train.budget import TimeBudget, fitted_total, linear_schedule
from anygrain.train.checkpoint import checkpoint_format
from anygrain.train.loop import EpochPosition, LoopSettings, StepCallback, StepResult, run_loop
from anygrain.train.optim import apply_update, clip_gradients, param_groups
from anygrain.train.options import GradClip, InBatchNegatives
from anygrain.train.phrase.config import PhraseTrainConfig
from anygrain.train.phrase.data import PhraseTrainData, load_phrase_data, plan_epoch
from anygrain.train.phrase.losses import (
    PrebatchQueue,
    Teacher,
    distill_kl,
    filter_bce,
    negatives_ce,
    span_ce,
)
from anygrain.train.resumable import Resumable
from anygrain.train.run_dir import RunDir
from anygrain.train.runlog import TrainLog, defer_sigint
from anygrain.utils.atomic import atomic_write_text
from anygrain.utils.device import autocast, resolve_device
from anygrain.utils.threads import set_threads

CKPT_FORMAT = checkpoint_format("phrase")
NOT_USED_FILE = "questions_not_used.jsonl"  # each training question left out, and why


# --- model and teacher ------------------------------------------------------------------------
def init_model(config: PhraseTrainConfig) -> PhraseEncoder:
    """A fresh phrase model from the configured encoder (seeded: the heads are random)."""
    torch.manual_seed(config.seed)
    return PhraseEncoder.from_pretrained(
        config.model,
        question_encoder=config.question_encoder,
        question_pooling=Pooling(config.question_pooling) if config.question_pooling else None,
        max_phrase_words=config.max_phrase_words,
        max_passage_length=config.max_passage_length,
        doc_stride=config.doc_stride,
        max_query_length=config.max_query_length,
        include_title=config.include_title,
    )


def load_teacher(path: str | Path, *, bf16: bool = False) -> Teacher:
    """A trained cross-attention reader (``anygrain.reader``) as the distillation teacher."""
    from anygrain.train.phrase.losses import ReaderTeacher

    try:
        return ReaderTeacher.load(path, bf16=bf16)
    except ImportError as e:
        raise AnygrainError(f"--teacher needs the reader (anygrain.reader): {e}") from None


# --- the trainer ------------------------------------------------------------------------------
class PhraseTrainer(EpochPosition, Resumable):
    """Holds model, data, optimizer and position; ``step`` runs one update."""

    CKPT_FORMAT = CKPT_FORMAT

    def __init__(
        self,
        config: PhraseTrainConfig,
        model: PhraseEncoder,
        data: PhraseTrainData,
        *,
        teacher: Teacher | None = None,
        fingerprint: str = "",
    ) -> None:
        self.cfg = config
        self.model = model
        self.data = data
        self.teacher = teacher
        self.device = resolve_device(config.device)
        from anygrain.phrase.packed import untie

        untie(model)  # a packed model's encoders share their unchanged tensors
        model.to(self.device)
        self.fingerprint = fingerprint or data.fingerprint()
        self.plans = [
            plan_epoch(data, e, config.seed, config.batch_size) for e in range(config.epochs)
        ]
        self.planned_steps = sum(len(p) for p in self.plans)
        self.fitted = False  # total_steps shrunk to a time budget (see fit_to_budget)
        self.set_total_steps(self.planned_steps)
        if config.freeze_embeddings:
            model.freeze_embeddings()
        self.optimizer = torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr)

        def schedule(step: int) -> float:
            return linear_schedule(step, self.warmup_steps, self.total_steps)

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.queue = PrebatchQueue(config.pre_batch)
        self.global_step = 0
        self.epoch = 0
        self.step_in_epoch = 0
        self.rng_state = torch.get_rng_state()
        self._teacher_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.window_masks = [
            (torch.from_numpy(w.start_ok.copy()), torch.from_numpy(w.end_ok.copy()))
            for w in data.windows
        ]

    def epoch_progress(self) -> float:
        """Epochs done, fractional (e.g. 1.25)."""
        if self.epoch >= len(self.plans):
            return float(self.epoch)
        return self.epoch_fraction(len(self.plans[self.epoch]))

    def set_total_steps(self, n: int) -> None:
        """Train for ``n`` steps (at most the planned epochs); warm-up and the pre-batch start
        are fractions of it."""
        self.total_steps = max(1, min(int(n), self.planned_steps))
        self.warmup_steps = max(1, int(self.cfg.warmup_ratio * self.total_steps))
        self.prebatch_step = int(math.floor(self.cfg.pre_batch_from * self.total_steps))

    def fit_to_budget(self, seconds_per_step: float, seconds_left: float) -> bool:
        """Fit the schedule to end within ``seconds_left`` (3% kept for saving), never past
        the planned epochs; a later fit may lengthen it again if steps got faster.
        True when the number of steps changed."""
        before = self.total_steps
        self.fitted = True
        self.set_total_steps(fitted_total(self.global_step, seconds_per_step, seconds_left))
        return self.total_steps != before

    # -- losses ---------------------------------------------------------------------------------
    def losses(
        self, batch: list[int], *, prebatch: bool
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """All loss terms of one batch (float32) plus ``total``, and the batch's gold
        ``(starts, ends, groups)`` for the pre-batch queue (pushed once the update is applied)."""
        cfg, data, model = self.cfg, self.data, self.model
        ex = [data.examples[i] for i in batch]
        wins = sorted({e.window for e in ex})
        wpos = {w: i for i, w in enumerate(wins)}
        dev = self.device
        hard = self._hard_windows(ex, set(wins))
        enc = model.collate([data.windows[w] for w in (*wins, *hard)])
        qenc = model.tokenize_questions([e.question for e in ex])
        with autocast(dev, cfg.bf16):
            start, end, filt = model.phrase_forward(**{k: v.to(dev) for k, v in enc.items()})
            qs, qe = model.question_forward(**{k: v.to(dev) for k, v in qenc.items()})
        start, end, filt, qs, qe = start.float(), end.float(), filt.float(), qs.float(), qe.float()
        n_all, t = start.shape[0], start.shape[1]
        n_w = len(wins)
        smask = torch.zeros((n_all, t), dtype=torch.bool)
        emask = torch.zeros((n_all, t), dtype=torch.bool)
        sgold = torch.zeros((n_all, t), dtype=torch.bool)
        egold = torch.zeros((n_all, t), dtype=torch.bool)
        for i, w in enumerate((*wins, *hard)):
            ms, me = self.window_masks[w]
            smask[i, : len(ms)] = ms
            emask[i, : len(me)] = me
            sgold[i, list(data.gold_starts[w])] = True
            egold[i, list(data.gold_ends[w])] = True
        smask, emask, sgold, egold = (x.to(dev) for x in (smask, emask, sgold, egold))
        wi = torch.tensor([wpos[e.window] for e in ex], device=dev)
        gs = torch.tensor([e.start for e in ex], device=dev)
        ge = torch.tensor([e.end for e in ex], device=dev)
        s_logits = torch.bmm(start[wi], qs.unsqueeze(-1)).squeeze(-1)  # (B, T)
        e_logits = torch.bmm(end[wi], qe.unsqueeze(-1)).squeeze(-1)
        out: dict[str, torch.Tensor] = {}
        out["single"] = 0.5 * (span_ce(s_logits, smask[wi], gs) + span_ce(e_logits, emask[wi], ge))
        gold_s = start[wi, gs]
        gold_e = end[wi, ge]
        groups = torch.tensor([data.windows[e.window].passage for e in ex], device=dev)
        q_items = self.queue.tensors() if (prebatch and cfg.pre_batch > 0) else None
        zero = s_logits.sum() * 0.0
        gold_in_batch = cfg.in_batch
        side_s: list[tuple[torch.Tensor, torch.Tensor]] = []  # (negative vectors, passage ids)
        side_e: list[tuple[torch.Tensor, torch.Tensor]] = []
        if cfg.in_batch and InBatchNegatives(cfg.in_batch_negatives) is InBatchNegatives.TOKENS:
            # the other passages' golds are among their tokens, so not added again
            gold_in_batch = False
            wg = torch.tensor([data.windows[w].passage for w in wins], device=dev)
            wg = wg[:, None].expand(n_w, t)
            side_s.append((start[:n_w][smask[:n_w]], wg[smask[:n_w]]))
            side_e.append((end[:n_w][emask[:n_w]], wg[emask[:n_w]]))
        if hard:
            # every token that may start (end) a phrase in a BM25 hard-negative passage is a
            # negative for every question of the batch, except its own passage's
            hg = torch.tensor([data.windows[w].passage for w in hard], device=dev)
            hg = hg[:, None].expand(len(hard), t)
            side_s.append((start[n_w:][smask[n_w:]], hg[smask[n_w:]]))
            side_e.append((end[n_w:][emask[n_w:]], hg[emask[n_w:]]))
        if q_items is not None:
            side_s.append((q_items[0], q_items[2]))
            side_e.append((q_items[1], q_items[2]))
        if gold_in_batch or side_s:

            def neg(
                q: torch.Tensor, gold: torch.Tensor, side: list[tuple[torch.Tensor, torch.Tensor]]
            ) -> torch.Tensor:
                return negatives_ce(
                    q,
                    gold,
                    groups,
                    in_batch=gold_in_batch,
                    extra=torch.cat([v for v, _ in side]) if side else None,
                    extra_groups=torch.cat([g for _, g in side]) if side else None,
                )

            out["neg"] = 0.5 * (neg(qs, gold_s, side_s) + neg(qe, gold_e, side_e))
        else:
            out["neg"] = zero
        out["filter"] = 0.5 * (
            filter_bce(filt[..., 0], smask, sgold) + filter_bce(filt[..., 1], emask, egold)
        )
        if self.teacher is not None and cfg.lambda_distill > 0:
            ts, te = self._teacher_probs(batch, t)
            out["distill"] = 0.5 * (
                distill_kl(s_logits, smask[wi], ts) + distill_kl(e_logits, emask[wi], te)
            )
        else:
            out["distill"] = zero
        out["total"] = (
            cfg.lambda_single * out["single"]
            + cfg.lambda_distill * out["distill"]
            + cfg.lambda_neg * out["neg"]
            + cfg.lambda_filter * out["filter"]
        )
        return out, (gold_s.detach(), gold_e.detach(), groups)

    def _teacher_probs(self, batch: list[int], t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher start/end probabilities over each example's window, padded to ``t``.

        The teacher is frozen, so each example is asked once and kept (float16, a few
        hundred bytes per question) for later epochs.
        """
        assert self.teacher is not None
        data = self.data
        todo = [i for i in batch if i not in self._teacher_cache]
        if todo:
            offs, titles, texts = [], [], []
            for i in todo:
                w = data.windows[data.examples[i].window]
                offs.append(np.stack([w.cs, w.ce], axis=1))
                _, title, text = data.passages[w.passage]
                titles.append(title)
                texts.append(text)
            probs = self.teacher([data.examples[i].question for i in todo], titles, texts, offs)
            for i, (ps, pe) in zip(todo, probs, strict=True):
                self._teacher_cache[i] = (
                    np.asarray(ps, dtype=np.float16),
                    np.asarray(pe, dtype=np.float16),
                )
        ts = torch.zeros((len(batch), t))
        te = torch.zeros((len(batch), t))
        for r, i in enumerate(batch):
            ps, pe = self._teacher_cache[i]
            ts[r, : len(ps)] = torch.from_numpy(ps.astype(np.float32))
            te[r, : len(pe)] = torch.from_numpy(pe.astype(np.float32))
        return ts.to(self.device), te.to(self.device)

    def _hard_windows(self, ex: list[Any], taken: set[int]) -> list[int]:
        """The BM25 hard-negative windows of a batch's questions (each once, none of the
        batch's own windows), at most ``hard_negatives`` per question."""
        per = self.cfg.hard_negatives
        if per <= 0 or not self.data.hard_windows:
            return []
        out: list[int] = []
        seen = set(taken)
        for e in ex:
            for w in self.data.hard_windows.get(e.qid, ())[:per]:
                if w not in seen:
                    seen.add(w)
                    out.append(w)
        return out

    # -- state (:class:`anygrain.train.resumable.Resumable`) --------------------------------------
    def state(self, data_fingerprint: str) -> dict[str, Any]:
        return {
            **super().state(data_fingerprint),
            "model": self.model.state_dict(),
            "queue": self.queue.state_dict(),
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "total_steps": self.total_steps,
            "fitted": self.fitted,
        }

    def restore(self, state: dict[str, Any], data_fingerprint: str, path: Path) -> None:
        super().restore(state, data_fingerprint, path)
        self.model.load_state_dict(state["model"])
        self.queue.load_state_dict(state["queue"])
        self.queue.to(self.device)
        torch.set_rng_state(self.rng_state)
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.set_total_steps(int(state["total_steps"]))
        self.fitted = bool(state["fitted"])

    # -- one update -----------------------------------------------------------------------------
    def step(self) -> tuple[dict[str, float], int]:
        """One optimizer update; returns the loss terms and the number of questions."""
        batch = self.plans[self.epoch][self.step_in_epoch]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        parts, golds = self.losses(batch, prebatch=self.global_step >= self.prebatch_step)
        parts["total"].backward()
        with defer_sigint():
            self.queue.push(*golds)
            norms = clip_gradients(
                self.model.parameter_sides(), self.cfg.max_grad_norm, GradClip(self.cfg.grad_clip)
            )
            apply_update(self.optimizer, self.scheduler)
            self.count_update(len(self.plans[self.epoch]))
        logged = {k: float(v.detach()) for k, v in parts.items()}
        logged.update({f"grad_norm_{side}": n for side, n in norms.items()})
        return logged, len(batch)

    # -- the loop's view (:class:`anygrain.train.loop.LoopTrainer`) ------------------------------
    def train_step(self) -> StepResult:
        epoch_before = self.epoch
        values, n = self.step()
        return StepResult(values, n, end_of_epoch=self.epoch != epoch_before)

    def log_fields(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch_progress(),
            "lr": self.scheduler.get_last_lr()[0],
            "prebatch": self.cfg.pre_batch > 0 and self.global_step > self.prebatch_step,
        }


# --- the run ----------------------------------------------------------------------------------


@torch.no_grad()
def calibrate_filter(
    model: PhraseEncoder,
    data: PhraseTrainData,
    *,
    n_windows: int = 200,
    recall: float = 0.99,
    seed: int = 0,
) -> dict[str, Any]:
    """The filter threshold keeping ``recall`` of gold starts and ends on training windows,
    with the share of word-boundary tokens it keeps (reported; the index default stays None)."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(len(data.windows), size=min(n_windows, len(data.windows)), replace=False)
    model.eval()
    gold_logits, all_logits = [], []
    for i in range(0, len(ids), 16):
        wins = [data.windows[int(w)] for w in ids[i : i + 16]]
        batch = {k: v.to(model.device) for k, v in model.collate(wins).items()}
        _, _, f = model.phrase_forward(**batch)
        for r, w in enumerate(wins):
            wi = int(ids[i + r])
            fl = f[r, : len(w)].float().cpu().numpy()
            all_logits.append(np.concatenate([fl[w.start_ok, 0], fl[w.end_ok, 1]]))
            gs, ge = sorted(data.gold_starts[wi]), sorted(data.gold_ends[wi])
            gold_logits.append(np.concatenate([fl[gs, 0], fl[ge, 1]]))
    g = np.concatenate(gold_logits)
    a = np.concatenate(all_logits)
    if not len(g):
        return {"threshold": None}
    tau = float(np.quantile(g, 1 - recall))
    return {
        "threshold": round(tau, 4),
        "gold_recall": recall,
        "kept_fraction": round(float((a >= tau).mean()), 4),
    }


def train_phrase(
    config: PhraseTrainConfig,
    *,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
    on_step: StepCallback | None = None,
    teacher: Teacher | None = None,
) -> Path:
    """Train a phrase model into ``config.out``; returns that directory.

    With ``resume`` a run continues from its last checkpoint and a finished run is
    not repeated.  ``on_step(global_step)`` runs after every update (tests interrupt
    there).  ``teacher`` overrides ``config.teacher`` (tests pass a fake one).
    """
    config.validate()
    resolve_device(config.device)  # a missing GPU is refused before any data is read
    set_threads(config.threads)
    run = RunDir(config.out, config, progress=progress)
    log, out = run.log, run.out
    t0 = time.time()
    model = init_model(config)
    data = load_phrase_data(
        config.train, model, errors=errors, max_examples=config.max_examples, seed=config.seed
    )
    fingerprint = data.fingerprint()
    if run.already_trained(MODEL_CONFIG, fingerprint, resume=resume):
        return out
    hard_note = ""
    if config.hard_negatives > 0:
        got = data.add_hard_negatives(
            config.hard_negatives, lang=model.config.lang, progress=progress
        )
        hard_note = f"BM25 hard negatives for {got} of {len(data.examples)} questions"
    if teacher is None and config.teacher:
        teacher = load_teacher(config.teacher, bf16=config.bf16)
    trainer = PhraseTrainer(config, model, data, teacher=teacher, fingerprint=fingerprint)
    if not trainer.resume(run, resume=resume):
        run.start(
            data=data.report(),
            steps_per_epoch=[len(p) for p in trainer.plans],
            total_steps=trainer.total_steps,
            prebatch_from_step=trainer.prebatch_step,
            data_seconds=round(time.time() - t0, 2),
        )
        a = data.align
        atomic_write_text(
            out / NOT_USED_FILE,
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data.not_used),
        )
        log.say(
            f"{len(data.examples)} training questions on {len(data.windows)} windows; "
            f"{a.n_failed} answers not aligned ({a.failed}); {len(data.not_used)} questions "
            f"not used ({data.questions_dropped} with no aligned answer, skipped: "
            f"{data.questions_skipped or 'none'}), each listed in {out / NOT_USED_FILE}",
            0,
        )
    if hard_note:  # after the start record, which begins a fresh log
        log.say(hard_note, trainer.global_step)
    stats, stopped = _run(trainer, config, log, progress, on_step, t0)
    model.save(out)
    if stopped:
        log.write({"event": "stopped", "step": trainer.global_step, "reason": stopped, **stats})
        return out
    run.finish(
        trainer.global_step,
        fingerprint,
        keep_checkpoints=config.keep_checkpoints,
        phrase_fingerprint=model.config.phrase_fingerprint,
        filter_calibration=calibrate_filter(model, data, seed=config.seed),
        **stats,
    )
    return out


def _run(
    trainer: PhraseTrainer,
    cfg: PhraseTrainConfig,
    log: TrainLog,
    progress: bool,
    on_step: StepCallback | None,
    t_origin: float,
) -> tuple[dict[str, Any], str]:
    """The loop; returns stats and why it stopped early ("" when it finished)."""
    torch.set_rng_state(trainer.rng_state)
    budget = TimeBudget(trainer, cfg, log, t_origin)

    def save_model() -> str:
        trainer.model.save(cfg.out)
        return " and model saved"

    stats = run_loop(
        trainer,
        log,
        LoopSettings(
            log_every=cfg.log_every,
            checkpoint_every=cfg.checkpoint_every,
            checkpoint_after_last=False,  # the model is saved next
            progress=progress,
            postfix="total",
        ),
        on_step=on_step,
        after_step=budget.after_step,
        should_stop=budget.should_stop,
        on_interrupt=save_model,
    )
    return stats.as_dict("questions"), stats.stopped
