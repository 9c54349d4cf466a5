"""Query-side fine-tuning of a phrase model against a built phrase index.

DensePhrases (Lee et al., 2021, Sec. 4.3) adapts the question encoder to the
index it will search: for each training question the current question encoder
retrieves the top phrases from the index, and the loss raises the probability of
the retrieved phrases that are correct, among all retrieved.  Only the question
side learns, so the stored phrase vectors -- and every index built with the same
phrase encoder -- stay valid (the phrase fingerprint is checked at the end).

Which retrieved phrases count as correct, by :class:`QuerySideLoss`:

* ``phrase``: the phrase text equals an answer (SQuAD/CMRC normalisation);
* ``passage``: the phrase lies in one of the question's gold passages -- the
  document-level loss of Lee, Wettig & Chen (2021), which teaches passage
  retrieval through phrases;
* ``both``: either.

Per question, ``loss = logsumexp(all retrieved) - logsumexp(correct retrieved)``,
scored exactly from the index's span vectors -- the float16 dump, or for a compressed
index (``--compress``) the vectors decoded from its FAISS codes, so that, as in
DensePhrases, the question encoder learns against the quantized phrases it will
search (:class:`~anygrain.phrase.compress.DecodedVectors`); questions with nothing correct in
their top phrases give no gradient and are counted.  Train on an index of the
*training* passages (never the test corpus), then search any index of the same
phrase encoder with the result: ``Index.load(test_index, model=OUT)``.

The run is resumable like the other trainers: checkpoints hold the question-side
weights, optimizer, scheduler, RNG and position, and a resumed run ends with the
same weights as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from anygrain.corpus.formats import parse_source
from anygrain.corpus.questions import Question
from anygrain.errors import AnygrainError, ErrorLog
from anygrain.eval.squad import exact_match
from anygrain.index.base import Index
from anygrain.index.scope import gold_rows
from anygrain.phrase.index import PhraseIndex
from anygrain.phrase.model import MODEL_CONFIG, PhraseEncoder
from anygrain.phrase.search import Phrases
from anygrain.train.checkpoint import checkpoint_format
from anygrain.train.loop import LoopSettings, StepCallback, StepResult, run_loop
from anygrain.train.optim import apply_update, param_groups
from anygrain.train.phrase.config import PhraseQuerySideConfig, QuerySideLoss
from anygrain.train.resumable import Resumable
from anygrain.train.run_dir import RunDir
from anygrain.train.runlog import TrainLog, defer_sigint
from anygrain.utils.precision import cpu_autocast
from anygrain.utils.threads import set_threads

CKPT_FORMAT = checkpoint_format("phrase-query-side")


@dataclass
class QuerySideData:
    """Training questions, each with its gold passage rows in the index's corpus."""

    questions: list[Question]
    gold_rows: list[np.ndarray]
    skipped: dict[str, int]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for q, rows in zip(self.questions, self.gold_rows, strict=True):
            h.update(json.dumps([q.text, q.answers, rows.tolist()]).encode())
        return h.hexdigest()[:16]


def load_query_side_data(
    sources: list[str],
    index: PhraseIndex,
    *,
    errors: ErrorLog | None = None,
    max_examples: int | None = None,
    seed: int = 0,
) -> QuerySideData:
    """Questions with answers from ``sources``; gold passages mapped to the index's rows.

    Questions without answers are skipped and counted; a gold passage missing from
    the index's corpus is an error when no gold of the question is found, because
    the index was then built on other passages than the questions'.
    """
    qs: list[Question] = []
    rows: list[np.ndarray] = []
    skipped = {"no_answer": 0}
    for src in sources:
        for q in parse_source(src, want="questions").questions(errors):
            if not q.answers or q.answers_are_regex:
                skipped["no_answer"] += 1
                continue
            found = gold_rows(index.corpus, q, source=src) if q.gold else []
            qs.append(q)
            rows.append(np.asarray(sorted(found), dtype=np.int64))
    if not qs:
        raise AnygrainError("no training questions with answers in " + ", ".join(sources))
    if max_examples is not None and max_examples < len(qs):
        pick = np.sort(np.random.default_rng(seed).choice(len(qs), max_examples, replace=False))
        qs = [qs[i] for i in pick]
        rows = [rows[i] for i in pick]
    return QuerySideData(qs, rows, skipped)


def question_modules(model: PhraseEncoder) -> nn.ModuleDict:
    """The parameters query-side training may change (everything that makes q_start/q_end)."""
    return nn.ModuleDict(
        {
            "questions": model.questions,
            "q_start_head": model.q_start_head,
            "q_end_head": model.q_end_head,
        }
    )


def positives(
    index: PhraseIndex,
    phrases: Phrases,
    question: Question,
    gold_rows: np.ndarray,
    loss: QuerySideLoss,
) -> np.ndarray:
    """Boolean mask over ``phrases``: which count as correct for ``question``."""
    t = index.table
    out = np.zeros(len(phrases), dtype=bool)
    if not len(phrases):
        return out
    rows = t.row[phrases.start]
    if loss in (QuerySideLoss.PASSAGE, QuerySideLoss.BOTH) and len(gold_rows):
        out |= np.isin(rows, gold_rows)
    if loss in (QuerySideLoss.PHRASE, QuerySideLoss.BOTH):
        uniq = sorted(set(rows.tolist()))
        texts = dict(zip(uniq, index.store.column("text", uniq), strict=True))
        for i in range(len(phrases)):
            if out[i]:
                continue
            r = int(rows[i])
            span = texts[r][int(t.cs[phrases.start[i]]) : int(t.ce[phrases.end[i]])]
            out[i] = bool(exact_match(span, question.answers))
    return out


def candidate_loss(
    q_start: torch.Tensor,
    q_end: torch.Tensor,
    start_vecs: torch.Tensor,
    end_vecs: torch.Tensor,
    positive: torch.Tensor,
) -> torch.Tensor:
    """``logsumexp(all) - logsumexp(positive)`` of one question's candidates.

    ``start_vecs``/``end_vecs`` (m, d) are the candidates' stored vectors; ``positive`` (m,)
    bool with at least one True.
    """
    scores = start_vecs @ q_start + end_vecs @ q_end
    return torch.logsumexp(scores, 0) - torch.logsumexp(scores[positive], 0)


class QuerySideTrainer(Resumable):
    """Holds model, index, data, optimizer and position; ``step`` runs one update."""

    CKPT_FORMAT = CKPT_FORMAT

    def __init__(
        self,
        config: PhraseQuerySideConfig,
        model: PhraseEncoder,
        index: PhraseIndex,
        data: QuerySideData,
        *,
        fingerprint: str = "",
    ) -> None:
        self.cfg = config
        self.fingerprint = fingerprint or data.fingerprint()
        self.with_positive = 0  # questions with a positive among their candidates, this run
        self.model = model
        self.index = index
        self.data = data
        self.kind = QuerySideLoss(config.loss)
        # a packed model's question encoder shares the phrase encoder's unchanged tensors
        # (its embeddings): trained, they must not move the phrase side
        from anygrain.phrase.packed import untie

        untie(model)
        for p in model.parameters():
            p.requires_grad_(False)
        self.trainable = question_modules(model)
        for p in self.trainable.parameters():
            p.requires_grad_(True)
        n = len(data.questions)
        self.steps_per_epoch = (n + config.batch_size - 1) // config.batch_size
        self.total_steps = self.steps_per_epoch * config.epochs
        warm = max(1, int(config.warmup_ratio * self.total_steps))
        self.optimizer = torch.optim.AdamW(
            param_groups(self.trainable, config.weight_decay), lr=config.lr
        )

        def schedule(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            return max(0.0, (self.total_steps - step) / max(1, self.total_steps - warm))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.global_step = 0
        self.rng_state = torch.get_rng_state()

    def batch(self, step: int) -> np.ndarray:
        epoch, i = divmod(step, self.steps_per_epoch)
        order = np.random.default_rng(self.cfg.seed + epoch).permutation(len(self.data.questions))
        return order[i * self.cfg.batch_size : (i + 1) * self.cfg.batch_size]

    def step(self) -> tuple[dict[str, float], int]:
        """One update over the next batch; returns loss and retrieval statistics (shares of
        the batch's questions), and the number of questions."""
        cfg, model, idx = self.cfg, self.model, self.index
        rows = self.batch(self.global_step)
        qs = [self.data.questions[int(i)] for i in rows]
        enc = model.tokenize_questions([q.text for q in qs])
        model.eval()  # retrieval with the current weights, no dropout
        with torch.no_grad(), cpu_autocast(cfg.bf16):
            s0, e0 = model.question_forward(**enc)
        found = idx.search_phrases(s0.float().numpy(), e0.float().numpy(), top_k=cfg.top_k)
        self.trainable.train()
        with cpu_autocast(cfg.bf16):
            q_s, q_e = model.question_forward(**enc)
        q_s, q_e = q_s.float(), q_e.float()
        terms: list[torch.Tensor] = []
        n_pos_top1 = 0
        for b, (q, ph) in enumerate(zip(qs, found, strict=True)):
            ph = Phrases(
                ph.start[: cfg.max_candidates],
                ph.end[: cfg.max_candidates],
                ph.score[: cfg.max_candidates],
            )
            pos = positives(idx, ph, q, self.data.gold_rows[int(rows[b])], self.kind)
            if not pos.any():
                continue
            n_pos_top1 += int(pos[0])
            # the vectors search scores: decoded from the codes when the index is compressed
            sv = torch.from_numpy(np.asarray(idx.table.start[ph.start], dtype=np.float32))
            ev = torch.from_numpy(np.asarray(idx.table.end[ph.end], dtype=np.float32))
            terms.append(candidate_loss(q_s[b], q_e[b], sv, ev, torch.from_numpy(pos)))
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.stack(terms).mean() if terms else None
        if loss is not None:
            loss.backward()
        with defer_sigint():
            apply_update(
                self.optimizer,
                self.scheduler,
                clip=self.trainable.parameters(),
                max_grad_norm=cfg.max_grad_norm,
                step_optimizer=loss is not None,
            )
            self.global_step += 1
            self.rng_state = torch.get_rng_state()
        self.with_positive += len(terms)
        return {
            # NaN when no question of the batch had a positive (the log skips it)
            "loss": float(loss.detach()) if loss is not None else float("nan"),
            "with_positive": len(terms) / len(qs),
            "top1_correct": n_pos_top1 / len(qs),
        }, len(qs)

    # -- the loop's view (:class:`anygrain.train.loop.LoopTrainer`) ------------------------------
    def train_step(self) -> StepResult:
        values, n = self.step()
        return StepResult(values, n, end_of_epoch=self.global_step % self.steps_per_epoch == 0)

    def log_fields(self) -> dict[str, Any]:
        return {"lr": self.scheduler.get_last_lr()[0]}

    # -- state (:class:`anygrain.train.resumable.Resumable`) --------------------------------------
    def state(self, data_fingerprint: str) -> dict[str, Any]:
        return {**super().state(data_fingerprint), "trainable": self.trainable.state_dict()}

    def restore(self, state: dict[str, Any], data_fingerprint: str, path: Path) -> None:
        super().restore(state, data_fingerprint, path)
        self.trainable.load_state_dict(state["trainable"])


def train_phrase_query_side(
    config: PhraseQuerySideConfig,
    *,
    progress: bool = True,
    resume: bool = True,
    errors: ErrorLog | None = None,
    on_step: StepCallback | None = None,
) -> Path:
    """Fine-tune the question side of ``config.index``'s phrase model into ``config.out``.

    The result is a phrase model directory with the index's phrase weights, loadable
    as ``Index.load(any_index_of_that_encoder, model=out)``.  With ``resume`` a run
    continues from its last checkpoint and a finished run is not repeated.
    """
    config.validate()
    set_threads(config.threads)
    run = RunDir(config.out, config, progress=progress)
    log, out = run.log, run.out
    # the questions are encoded by the model being trained, never by an exported graph
    index = Index.load(config.index, runtime="torch")
    if not isinstance(index, PhraseIndex):
        raise AnygrainError(f"{config.index}: query-side training needs a phrase index")
    model = index.model
    fingerprint_before = index.manifest["model"]["fingerprint"]
    data = load_query_side_data(
        config.train, index, errors=errors, max_examples=config.max_examples, seed=config.seed
    )
    data_fp = data.fingerprint()
    if run.already_trained(MODEL_CONFIG, data_fp, resume=resume):
        return out
    torch.manual_seed(config.seed)
    trainer = QuerySideTrainer(config, model, index, data, fingerprint=data_fp)
    if not trainer.resume(run, resume=resume):
        run.start(
            questions=len(data.questions),
            skipped=data.skipped,
            total_steps=trainer.total_steps,
            index=str(config.index),
        )
    stats = _run(trainer, config, log, progress, on_step)
    if model.phrase_fingerprint() != fingerprint_before:
        raise AnygrainError("internal error: query-side training changed the phrase encoder")
    model.save(out)
    run.finish(
        trainer.global_step,
        data_fp,
        keep_checkpoints=False,
        phrase_fingerprint=model.config.phrase_fingerprint,
        **stats,
    )
    return out


def _run(
    trainer: QuerySideTrainer,
    cfg: PhraseQuerySideConfig,
    log: TrainLog,
    progress: bool,
    on_step: StepCallback | None,
) -> dict[str, Any]:
    torch.set_rng_state(trainer.rng_state)
    settings = LoopSettings(
        desc="query-side training",
        log_every=cfg.log_every,
        checkpoint_every=cfg.checkpoint_every,
        checkpoint_after_last=False,  # the model is saved next
        progress=progress,
    )
    stats = run_loop(trainer, log, settings, on_step=on_step).as_dict("questions")
    return {**stats, "with_positive": round(trainer.with_positive / max(stats["questions"], 1), 4)}
