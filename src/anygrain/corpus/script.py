"""Chinese script conversion (Traditional <-> Simplified) with OpenCC, keeping offsets.

DRCD is Traditional, CMRC 2018 and XQuAD zh are Simplified.  A model trained on one script
sees the other's characters as different tokens; converting a SQuAD-format file before
training or indexing puts both in one script.  Answers are located by character offset
(``answer_start``), so a conversion must keep every text's length: OpenCC's phrase rules
can change it (one Traditional phrase to a shorter Simplified one), and then the text is
converted character by character, which keeps it.  OpenCC is an optional dependency
(``pip install anygrain[zh]``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anygrain.errors import AnygrainError, InputError
from anygrain.utils.atomic import atomic_write_text
from anygrain.utils.targets import check_output_file


class Script(str, enum.Enum):
    SIMPLIFIED = "simplified"
    TRADITIONAL = "traditional"


# OpenCC's configurations: Traditional (OpenCC standard) to Simplified, and back
_OPENCC_CONFIG = {Script.SIMPLIFIED: "t2s", Script.TRADITIONAL: "s2t"}


def converter(script: Script) -> Callable[[str], str]:
    """A function converting text to ``script`` without changing its length."""
    try:
        import opencc
    except ImportError:
        raise AnygrainError(
            "converting Chinese script needs OpenCC: pip install anygrain[zh] (or opencc)"
        ) from None
    cc = opencc.OpenCC(_OPENCC_CONFIG[script])

    def convert(text: str) -> str:
        out: str = cc.convert(text)
        if len(out) == len(text):
            return out
        # a phrase rule changed the length: character by character keeps every offset
        chars = (cc.convert(c) for c in text)
        return "".join(c2 if len(c2) == 1 else c for c, c2 in zip(text, chars, strict=True))

    return convert


@dataclass
class ConversionReport:
    paragraphs: int = 0
    questions: int = 0
    answers: int = 0
    changed_characters: int = 0


def convert_squad_file(src: str | Path, out: str | Path, script: Script) -> ConversionReport:
    """Write ``src`` (SQuAD-format JSON: SQuAD, CMRC 2018, DRCD, XQuAD) to ``out`` in
    ``script``: titles, contexts, questions and answers; offsets stay valid.  An answer is
    cut from the converted context at its offset, so it matches the context exactly."""
    src, out = Path(src), Path(out)
    if not src.exists():
        raise AnygrainError(f"{src}: no such file")
    if src.is_dir():
        raise AnygrainError(f"{src}: is a directory; give the SQuAD-format JSON file to convert")
    if out.is_dir():
        raise AnygrainError(
            f"{out}: is a directory; give the path of the file to write (e.g. {out / src.name})"
        )
    # the one check every writer uses: never over its input (a hard link included), never
    # inside an anygrain index, model or corpus
    check_output_file(out, [src], what="the converted file")
    # here, not at the top: importing the readers package loads every reader, and the
    # option type Script is imported by ``anygrain --help``
    from anygrain.corpus.readers._io import load_json

    try:
        data: Any = load_json(src)
    except OSError as e:  # unreadable (permissions, a vanished file): the path and why
        raise AnygrainError(f"{src}: cannot read it ({e.strerror or e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputError("not a SQuAD-format file (no top-level 'data' list)", path=str(src))
    conv = converter(Script(script))
    rep = ConversionReport()

    def c(text: str) -> str:
        new = conv(text)
        rep.changed_characters += sum(a != b for a, b in zip(text, new, strict=True))
        return new

    for i, article in enumerate(data["data"]):
        if not isinstance(article, dict):
            raise InputError("not an object", path=str(src), field=f"data[{i}]")
        if isinstance(article.get("title"), str):
            article["title"] = c(article["title"])
        for para in article.get("paragraphs", []):
            context = para.get("context", "")
            para["context"] = new_context = c(context)
            rep.paragraphs += 1
            for qa in para.get("qas", []):
                qa["question"] = c(qa.get("question", ""))
                rep.questions += 1
                for ans in qa.get("answers", []):
                    text, start = ans.get("text", ""), ans.get("answer_start")
                    if isinstance(start, int) and context[start : start + len(text)] == text:
                        ans["text"] = new_context[start : start + len(text)]
                    else:  # no usable offset: the answer alone
                        ans["text"] = c(text)
                    rep.answers += 1
    try:
        atomic_write_text(out, json.dumps(data, ensure_ascii=False))
    except OSError as e:  # a directory in the way, no permission, no space: one line
        raise AnygrainError(f"{e.filename or out}: cannot write it ({e.strerror or e})") from None
    return rep
