"""PDF (``.pdf``): the text layer, page by page, each passage on one page.

Read with pypdf (BSD-3-Clause, pure Python, in the ``anygrain[docs]`` extra).  The
document's text is the pages' text joined by blank lines; each page is a section whose
passages carry ``page`` (1-based) in their metadata.  A PDF with no text on any page (a
scan without OCR) is skipped with that reason, not indexed empty; the pages of a PDF
that have no text are listed in its ``pages_without_text``.  A damaged or encrypted PDF
is skipped, naming what pypdf found.  ``title`` and ``author`` come from the PDF's
document information where it has them (else the title is the file name).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from anygrain.corpus.files import (
    Extracted,
    FileType,
    Skip,
    normalize_newlines,
    register_file_format,
)
from anygrain.corpus.records import Span


def _page_text(page: Any) -> str:
    text = normalize_newlines(page.extract_text() or "").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def _info(reader: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        info = reader.metadata
    except Exception:  # a damaged information dictionary: the pages may still be read
        return out
    for key, attr in (("title", "title"), ("author", "author")):
        value = getattr(info, attr, None) if info is not None else None
        if isinstance(value, str) and value.strip():
            out[key] = " ".join(value.split())
    return out


def extract(data: bytes, path: Path) -> Extracted:
    from pypdf import PdfReader

    # pypdf logs each irregularity it reads past; a damaged file is reported as a skip
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Skip("an encrypted PDF (it needs a password)", "encrypted PDF")
        pages = [_page_text(p) for p in reader.pages]
    except Skip:
        raise
    except Exception as e:  # pypdf raises many kinds on a damaged file
        why = " ".join(str(e).split())[:200]
        raise Skip(f"a damaged PDF ({type(e).__name__}: {why})", "damaged PDF") from None
    if not pages:
        raise Skip("a PDF without pages", "damaged PDF")
    if not any(pages):
        raise Skip(
            f"no text layer on its {len(pages)} page(s): a scanned PDF? OCR it first",
            "no text layer (scanned PDF)",
        )
    info = _info(reader)
    title = info.pop("title", "")
    parts: list[str] = []
    sections: list[Span] = []
    pos = 0
    for number, text in enumerate(pages, 1):
        if not text:
            continue
        if parts:
            pos += 2
        sections.append(Span(pos, pos + len(text), title=title or path.stem, meta={"page": number}))
        parts.append(text)
        pos += len(text)
    meta: dict[str, Any] = {**info, "page_count": len(pages)}
    empty = [n for n, t in enumerate(pages, 1) if not t]
    if empty:
        meta["pages_without_text"] = empty
    return Extracted("\n\n".join(parts), title, sections, meta)


register_file_format(
    FileType("pdf", (".pdf",), extract=extract, library="pypdf"),
    "PDF (.pdf): the text layer page by page, each passage on one page with its page number; "
    "a scanned PDF is reported, not indexed (needs anygrain[docs])",
)
