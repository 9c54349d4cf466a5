"""Word documents (``.docx``): paragraphs and tables in order, headings as structure.

Read with python-docx (MIT, in the ``anygrain[docs]`` extra).  Each paragraph is a block
and each table row a block (its cells joined by `` | ``); blocks are joined by blank lines
into the document's text.  Paragraphs styled ``Heading 1`` to ``Heading 9`` (and
``Title``, as level 1) are the headings whose path titles the passages under them.  The
document's core properties give its title (else its first heading, else the file name)
and ``author``.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from anygrain.corpus.files import (
    Extracted,
    FileType,
    Skip,
    join_blocks,
    register_file_format,
)

_HEADING = re.compile(r"^heading\s*([1-9])$", re.I)


def _level(paragraph: Any) -> int:
    try:
        name = paragraph.style.name if paragraph.style is not None else ""
    except (KeyError, ValueError):  # a style the file names but does not define
        return 0
    if (name or "").lower() == "title":
        return 1
    m = _HEADING.match(name or "")
    return int(m.group(1)) if m else 0


def _blocks(document: Any) -> list[tuple[int, str]]:
    """``(heading level or 0, text)`` of each paragraph and table row, in order."""
    from docx.table import Table

    out: list[tuple[int, str]] = []
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            for row in item.rows:
                cells = [" ".join(c.text.split()) for c in row.cells]
                text = " | ".join(c for c in dict.fromkeys(cells) if c)  # merged cells repeat
                if text:
                    out.append((0, text))
            continue
        text = "\n".join(line.strip() for line in item.text.split("\n")).strip()
        if text:
            out.append((_level(item), " ".join(text.split()) if _level(item) else text))
    return out


def extract(data: bytes, path: Path) -> Extracted:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        blocks = _blocks(document)
        props = document.core_properties
        title = " ".join((props.title or "").split())
        author = " ".join((props.author or "").split())
    except Exception as e:  # python-docx raises many kinds on a damaged or foreign file
        why = " ".join(str(e).split())[:200]
        raise Skip(f"a damaged DOCX ({type(e).__name__}: {why})", "damaged DOCX") from None
    if not title:
        title = next((t for level, t in blocks if level), "")
    text, sections = join_blocks(blocks, title)
    meta = {"author": author} if author else {}
    return Extracted(text, title, sections, meta)


register_file_format(
    FileType("docx", (".docx",), extract=extract, library="docx"),
    "Word (.docx): paragraphs and tables, headings kept as the passage titles "
    "(needs anygrain[docs])",
)
