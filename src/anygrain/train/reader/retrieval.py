"""DPR-style retrieved negatives for reader training: search each training question in an
index and keep the hits that hold no answer."""

from __future__ import annotations

from typing import Any

from anygrain.eval.answers import AnswerMatcher
from anygrain.train.reader.data import ReaderData
from anygrain.utils.progress import progress_bar


def attach_retrieved(
    data: ReaderData, index: Any, depth: int, *, progress: bool = True, batch_size: int = 256
) -> dict[str, int]:
    """Search every training question and keep, per example, the top-``depth`` hits
    that are not its positive and contain no answer (DPR's negatives)."""
    kept = without = 0
    exs = data.examples
    batches = range(0, len(exs), batch_size)
    for b in progress_bar(batches, desc="retrieving negatives", unit="batch", disable=not progress):
        chunk = exs[b : b + batch_size]
        results = index.search([ex.question for ex in chunk], depth)
        for ex, hits in zip(chunk, results, strict=True):
            matcher = AnswerMatcher(ex.answers)
            pos_text = data.texts[ex.positive]
            ex.retrieved = []
            for h in hits:
                if h.text == pos_text or matcher.in_text(h.text):
                    continue
                ex.retrieved.append(data.add_passage(h.title, h.text))
            kept += len(ex.retrieved)
            without += not ex.retrieved
    return {"retrieved_negatives": kept, "questions_without_retrieved": without}
