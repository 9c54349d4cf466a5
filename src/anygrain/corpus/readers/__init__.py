"""Readers, one module per format; importing this package registers them all."""

from anygrain.corpus.readers import (  # noqa: F401
    beir,
    delimited,
    docx,
    dpr_qas,
    dpr_train,
    dpr_tsv,
    folder,
    html,
    jsonl,
    kilt,
    markdown,
    multicpr,
    nq_open,
    pdf,
    qa_json,
    rst,
    squad,
    text,
    wikitext,
)
