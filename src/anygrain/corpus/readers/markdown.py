"""Markdown (``.md``, ``.markdown``): headings as structure, code kept as text, YAML front
matter as metadata.

The document's text is the file itself (newlines normalised), so a passage's offsets are
offsets into the file.  markdown-it-py (CommonMark, a dependency of rich) finds the
headings, ATX and Setext, and knows that a ``#`` line inside a fenced code block is code;
each heading's section is the text from the line after it to the next heading, titled
with its heading path.  The front matter (``---`` YAML ``---`` at the top) is metadata,
not text of any passage; its ``title`` is the document's title, else the first level-1
heading, else the file name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from markdown_it import MarkdownIt

from anygrain.corpus.files import (
    Extracted,
    FileType,
    decode_text,
    heading_sections,
    register_file_format,
)

_FRONT_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.M)
# libyaml's safe loader where PyYAML was built with it (several times faster), else Python's
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark")
    md.core.ruler.disable("inline")  # block structure only; headings are parsed on their own
    return md


_MD = _parser()
_INLINE = MarkdownIt("commonmark")


def front_matter(text: str) -> tuple[dict[str, Any], int]:
    """The YAML front matter's fields and where the body starts (0: none).  Front matter
    that is not a YAML mapping is left as text."""
    if not text.startswith("---\n"):
        return {}, 0
    m = _FRONT_END.search(text, 4)
    if m is None:
        return {}, 0
    try:
        data = yaml.load(text[4 : m.start()], Loader=_YAML_LOADER)
    except yaml.YAMLError:
        return {}, 0
    if data is not None and not isinstance(data, dict):
        return {}, 0
    end = m.end() + 1 if m.end() < len(text) else m.end()
    return {str(k): v for k, v in (data or {}).items()}, end


def heading_text(source: str) -> str:
    """A heading's inline Markdown as plain text (emphasis, links and code marks dropped)."""
    parts = []
    for tok in _INLINE.parseInline(source):
        for child in tok.children or []:
            if child.type in ("text", "code_inline", "html_inline"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
    return " ".join("".join(parts).split())


def _line_starts(text: str) -> list[int]:
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    starts.append(len(text))
    return starts


def extract(data: bytes, path: Path) -> Extracted:
    text = decode_text(data, path)
    meta, body = front_matter(text)
    starts = _line_starts(text)
    skipped_lines = text.count("\n", 0, body)
    # the front matter's lines blanked, so the parser's line numbers are the file's
    tokens = _MD.parse("\n" * skipped_lines + text[body:])
    heads: list[tuple[int, int, int, str]] = []  # level, start, where its body starts, text
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map is not None:
            a, b = tok.map
            after = starts[min(b, len(starts) - 1)]
            heads.append((int(tok.tag[1]), starts[a], after, heading_text(tokens[i + 1].content)))
    title = meta.get("title") if isinstance(meta.get("title"), str) else ""
    if not title:
        title = next((h[3] for h in heads if h[0] == 1), "")
    lead = (body, heads[0][1] if heads else len(text))
    return Extracted(text, title, heading_sections(text, title, lead, heads), meta)


register_file_format(
    FileType("markdown", (".md", ".markdown"), extract=extract),
    "Markdown (.md): headings kept as the passage titles, code as text, YAML front matter "
    "as metadata; a passage never spans two sections",
)
