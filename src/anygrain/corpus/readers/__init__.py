"""Readers, one module per format; importing this package registers them all."""

from anygrain.corpus.readers import (  # noqa: F401
    beir,
    dpr_qas,
    dpr_train,
    dpr_tsv,
    jsonl,
    kilt,
    multicpr,
    nq_open,
    qa_json,
    squad,
    text,
    wikitext,
)
