"""HTML (``.html``, ``.htm``): the main content, its title and headings; navigation and
other page furniture left out.

Parsed with selectolax (MIT; the Lexbor HTML5 parser, in the ``anygrain[docs]`` extra),
chosen over trafilatura (Apache-2.0, better on cluttered web pages) because it is about
fifty times faster per page, which keeps a folder's HTML within the indexing rate of its
other files, and it brings no other dependency.  The boilerplate rule is ours: the
content is ``<main>`` (or ``role="main"``, or the page's only ``<article>``, else
``<body>``); scripts, styles, forms, ``<nav>``, ``<aside>``, footers, hidden elements,
navigation roles and elements whose class or id says menu, sidebar, breadcrumb, cookie,
share and the like are dropped, and so is the page header when the content is the whole
body.  What is left becomes blocks (headings, paragraphs, list items, table rows,
preformatted text kept as it is), joined by blank lines: that is the document's text,
which offsets point into.  The title is ``<title>``, else the first ``<h1>``; ``author``,
``description`` and ``keywords`` meta tags are metadata.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from anygrain.corpus.files import (
    Extracted,
    FileType,
    Skip,
    join_blocks,
    normalize_newlines,
    register_file_format,
)

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_DROPPED = frozenset(
    [
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "iframe",
        "object",
        "embed",
        "canvas",
        "button",
        "select",
        "input",
        "textarea",
        "form",
        "nav",
        "aside",
        "footer",
        "head",
        "dialog",
    ]
)
_BLOCKS = frozenset(
    [
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "blockquote",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "tr",
        "figure",
        "figcaption",
        "caption",
        "details",
        "summary",
        "address",
        "fieldset",
        "body",
        "hr",
        "center",
        "hgroup",
        "legend",
    ]
)
_ROLES = frozenset(
    [
        "navigation",
        "contentinfo",
        "complementary",
        "search",
        "menu",
        "menubar",
        "dialog",
        "alert",
        "alertdialog",
    ]
)
_FURNITURE = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|menu|sidebar|breadcrumbs?|footer|cookies?|consent|"
    r"advert|advertisement|ads|share|sharing|social|skip|skiplink|related|promo|newsletter|"
    r"popup|modal|banner)(?:$|[\s_-])",
    re.I,
)
_CHARSET = re.compile(rb"""charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.I)


def decode_html(data: bytes) -> str:
    """UTF-8, else the charset the page declares; neither, a :class:`Skip`."""
    if b"\x00" in data[:8192]:
        raise Skip("a binary file, not HTML", "binary file")
    try:
        return normalize_newlines(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        pass
    m = _CHARSET.search(data[:4096])
    if m is not None:
        try:
            return normalize_newlines(data.decode(m.group(1).decode("ascii")))
        except (LookupError, UnicodeDecodeError):
            pass
    raise Skip("not UTF-8, and no charset it is written in declared", "not UTF-8")


def _squash(s: str) -> str:
    return " ".join(s.split())


class _Walk:
    """The blocks of the content: ``(heading level, or 0 for text, text)``."""

    def __init__(self, whole_body: bool) -> None:
        self.whole_body = whole_body
        self.blocks: list[tuple[int, str]] = []
        self.buf: list[str] = []

    def flush(self) -> None:
        text = _squash("".join(self.buf))
        self.buf = []
        if text:
            self.blocks.append((0, text))

    def furniture(self, node: Any) -> bool:
        attrs = node.attributes
        if "hidden" in attrs or attrs.get("aria-hidden") == "true":
            return True
        if (attrs.get("role") or "") in _ROLES:
            return True
        if node.tag == "header" and self.whole_body:
            return True
        names = f"{attrs.get('class') or ''} {attrs.get('id') or ''}"
        return bool(names.strip()) and _FURNITURE.search(names) is not None

    def walk(self, node: Any) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "-text":
                self.buf.append(child.text(deep=False))
            elif tag.startswith("-") or tag in _DROPPED or self.furniture(child):
                continue
            elif tag in _HEADINGS:
                self.flush()
                text = _squash(child.text(deep=True))
                if text:
                    self.blocks.append((_HEADINGS[tag], text))
            elif tag == "pre":
                self.flush()
                text = normalize_newlines(child.text(deep=True)).strip("\n")
                if text.strip():
                    self.blocks.append((0, text))
            elif tag in ("br", "td", "th"):
                if tag != "br":
                    self.walk(child)
                self.buf.append(" ")
            elif tag in _BLOCKS:
                self.flush()
                self.walk(child)
                self.flush()
            else:
                self.walk(child)


def _meta(tree: Any) -> dict[str, Any]:
    out = {}
    for name in ("author", "description", "keywords"):
        node = tree.css_first(f'meta[name="{name}"]')
        value = _squash(node.attributes.get("content") or "") if node is not None else ""
        if value:
            out[name] = value
    return out


def extract(data: bytes, path: Path) -> Extracted:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(decode_html(data))
    node = tree.css_first("title")
    title = _squash(node.text()) if node is not None else ""
    meta = _meta(tree)
    articles = tree.css("article")
    root = (
        tree.css_first("main")
        or tree.css_first('[role="main"]')
        or (articles[0] if len(articles) == 1 else None)
    )
    walk = _Walk(whole_body=root is None)
    root = root or tree.body or tree.root
    if root is None:
        raise Skip("no HTML content in it", "no text")
    try:
        walk.walk(root)
    except RecursionError:
        raise Skip("HTML nested too deep to read", "damaged HTML") from None
    walk.flush()
    if not title:
        title = next((t for level, t in walk.blocks if level == 1), "")
    text, sections = join_blocks(walk.blocks, title)
    return Extracted(text, title, sections, meta)


register_file_format(
    FileType("html", (".html", ".htm", ".xhtml"), extract=extract, library="selectolax"),
    "HTML (.html): the main content without navigation, title and headings kept as the "
    "passage titles (needs anygrain[docs])",
)
