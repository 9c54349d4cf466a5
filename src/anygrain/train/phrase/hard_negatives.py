"""BM25 hard-negative passages for phrase training (DPR's recipe, used by DensePhrases'
later training code and by Kim et al. 2022 to make phrase scores compare across passages).

For each training question, the passages of the training corpus that BM25 ranks
highest for it, other than its own passage and any passage containing its answer
text, become negatives: every token of them that may start (end) a phrase enters the
question's softmax, so the gold phrase must outscore lexically similar passages, which
is exactly the competition open-corpus search puts it in.
"""

from __future__ import annotations

from collections.abc import Sequence

from anygrain.corpus.lang import Lang
from anygrain.sparse.analyzers import make_analyzer
from anygrain.utils.progress import progress_bar

_K1, _B = 0.9, 0.4  # DPR's Lucene setting, as anygrain's BM25 index uses
_EXTRA = 8  # ranked passages looked at per wanted negative (some hold the answer)


def mine_hard_passages(
    passages: Sequence[tuple[str, str]],
    questions: Sequence[tuple[str, int, str, str]],
    *,
    n: int,
    lang: str = "en",
    progress: bool = False,
    batch_size: int = 2048,
) -> dict[str, list[int]]:
    """``{question id: [passage index, ...]}``, at most ``n`` each, best first.

    ``passages`` are ``(title, text)``; ``questions`` are ``(id, own passage, question,
    answer text)``.  A passage whose text contains the answer (case-folded) is skipped: it may
    well answer the question, and a false negative teaches the wrong thing.
    """
    import bm25s

    if n <= 0 or not questions:
        return {}
    analyzer = make_analyzer(Lang(lang))
    docs = [f"{title.replace('_', ' ')}\n{text}" if title else text for title, text in passages]
    retriever = bm25s.BM25(k1=_K1, b=_B, method="lucene")
    retriever.index(analyzer.tokenize(docs), show_progress=False)
    vocab = retriever.vocab_dict
    lowered = [text.lower() for _, text in passages]
    k = min(len(passages), n * _EXTRA + 1)
    out: dict[str, list[int]] = {}
    batches = [questions[i : i + batch_size] for i in range(0, len(questions), batch_size)]
    for batch in progress_bar(
        batches, desc="mining BM25 hard negatives", unit="batch", disable=not progress
    ):
        tokens = analyzer.tokenize([question for _, _, question, _ in batch])
        known = [i for i, t in enumerate(tokens) if any(w in vocab for w in t)]
        if not known:
            continue
        rows, scores = retriever.retrieve(
            [[w for w in tokens[i] if w in vocab] for i in known], k=k, show_progress=False
        )
        for r, i in enumerate(known):
            qid, own, _, answer = batch[i]
            answer = answer.lower()
            picked: list[int] = []
            for p, s in zip(rows[r], scores[r], strict=True):
                p = int(p)
                if s <= 0 or p == own or (answer and answer in lowered[p]):
                    continue
                picked.append(p)
                if len(picked) == n:
                    break
            if picked:
                out[qid] = picked
    return out
