"""reStructuredText (``.rst``, ``.rest``): section titles as structure, the rest as text.

The document's text is the file itself (newlines normalised), so offsets are into the
file.  A section title is a line of text underlined (and optionally overlined) with one
repeated punctuation character, the underline at least as long as the title or four
characters, after a blank line or at the top, as docutils reads them; the levels follow
the order in which the adornment styles first appear.  Literal and code blocks are
indented, so their lines are never titles.  A field list at the top of the file (before
or right after the first title: ``:author: Ada``, Sphinx's ``:orphan:``) is metadata.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from anygrain.corpus.files import (
    Extracted,
    FileType,
    decode_text,
    heading_sections,
    register_file_format,
)

_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1*$")  # one repeated printable punctuation char
_FIELD = re.compile(r"^:([^:\s][^:]*):(?:\s+(.*))?$")


def _adornment(line: str) -> str | None:
    s = line.rstrip()
    return s[0] if s and _ADORN.match(s) else None


def _titles(lines: list[str]) -> list[tuple[int, int, str, tuple[str, bool]]]:
    """``(first line, line after the title, title text, style)`` of each section title."""
    out = []
    i, n = 0, len(lines)
    while i < n - 1:
        line = lines[i]
        blank_before = i == 0 or not lines[i - 1].strip()
        over = _adornment(line)
        # overline, title, underline of the same character and length
        if (
            over
            and blank_before
            and i + 2 < n
            and lines[i + 1].strip()
            and _adornment(lines[i + 1]) is None
            and _adornment(lines[i + 2]) == over
            and len(lines[i + 2].rstrip()) == len(line.rstrip())
        ):
            out.append((i, i + 3, lines[i + 1].strip(), (over, True)))
            i += 3
            continue
        under = _adornment(lines[i + 1])
        text = line.rstrip()
        if (
            under
            and blank_before
            and text
            and not line[0].isspace()
            and _adornment(line) is None
            and len(lines[i + 1].rstrip()) >= min(len(text), 4)
        ):
            out.append((i, i + 2, text.strip(), (under, False)))
            i += 2
            continue
        i += 1
    return out


def _field_list(lines: list[str], start: int) -> tuple[dict[str, Any], int]:
    """The fields of a field list starting at line ``start`` (after blank lines) and the
    line after it."""
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    meta: dict[str, Any] = {}
    while i < len(lines):
        m = _FIELD.match(lines[i])
        if not m:
            break
        meta[m.group(1).strip().lower()] = (m.group(2) or "").strip()
        i += 1
    return meta, i


def extract(data: bytes, path: Path) -> Extracted:
    text = decode_text(data, path)
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    starts[-1] = len(text)  # the last line has no newline after it
    titles = _titles(lines)
    # a field list at the top, or right after a first title, is metadata, not text
    meta, skip_to = _field_list(lines, 0)
    if not meta and titles and not text[: starts[titles[0][0]]].strip():
        meta, skip_to = _field_list(lines, titles[0][1])
    if not meta:
        skip_to = 0
    levels: dict[tuple[str, bool], int] = {}
    for *_, style in titles:
        levels.setdefault(style, len(levels) + 1)
    title = titles[0][2] if titles else ""
    cut = min(starts[skip_to], len(text))
    heads = [
        (levels[style], starts[first], max(min(starts[after], len(text)), cut), head)
        for first, after, head, style in titles
    ]
    lead = (cut, max(cut, heads[0][1]) if heads else len(text))
    return Extracted(text, title, heading_sections(text, title, lead, heads), meta)


register_file_format(
    FileType("rst", (".rst", ".rest"), extract=extract),
    "reStructuredText (.rst): section titles kept as the passage titles; a passage never "
    "spans two sections",
)
