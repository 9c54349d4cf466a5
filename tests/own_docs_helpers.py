"""Files of the kinds people keep their knowledge in, written by the tests: Markdown,
reStructuredText, HTML, CSV, TSV, JSONL, text, PDF (reportlab) and DOCX (python-docx),
with known headings and page texts; and broken ones (damaged, scanned, empty, binary,
not UTF-8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MARKDOWN = """---
title: Install guide
tags: [setup, network]
updated: 2024-05-01
source: the wiki
---
Read this before installing anything.

# Install

Run the installer from the release page. It asks for a target directory.

## Configuration

Settings live in a TOML file in the home directory.

```
# this line is code, not a heading
[network]
timeout = 30
```

### Proxies

Set HTTP_PROXY to the address of your proxy server. The installer honours NO_PROXY too.

Upgrading
=========

Run the installer again; your settings are kept.
"""

RST = """:author: Ada

==========
User guide
==========

The guide explains the command line.

Searching
---------

Searching an index returns ranked passages with their scores.

Filters
~~~~~~~

A filter keeps the hits whose metadata match a field value.

::

    not a title
    -----------

Exporting
---------

Exporting writes a TREC run file for evaluation.
"""

HTML = """<!doctype html>
<html lang="en"><head><title>Release notes</title>
<meta name="author" content="The team"><style>p { color: red }</style></head>
<body>
<header><a href="/">Home</a> <a href="/docs">Docs</a></header>
<nav><ul><li>Menu item one</li><li>Menu item two</li></ul></nav>
<div class="sidebar">Sidebar links everywhere</div>
<main>
<h1>Version 2.0</h1>
<p>Version 2.0 brings <b>faster</b> indexing of large folders.</p>
<h2>Breaking changes</h2>
<p>The old configuration key <code>cache_dir</code> was renamed to storage_dir.</p>
<pre>anygrain index docs --out idx
anygrain search idx "question"</pre>
<table><tr><th>Option</th><th>Default</th></tr><tr><td>--k</td><td>10</td></tr></table>
</main>
<footer>Copyright 2024 the team</footer>
<script>console.log("not text")</script>
</body></html>
"""

PDF_PAGES = [
    ["The annual report covers revenue growth in Europe.", "Revenue rose by twelve percent."],
    [],  # a page without text: listed in pages_without_text
    ["Page three explains the new warehouse in Lyon.", "It opened in March."],
]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def md_file(tmp: Path) -> Path:
    return write(tmp / "install.md", MARKDOWN)


def rst_file(tmp: Path) -> Path:
    return write(tmp / "guide.rst", RST)


def html_file(tmp: Path) -> Path:
    return write(tmp / "notes.html", HTML)


def csv_file(tmp: Path) -> Path:
    return write(
        tmp / "faq.csv",
        'id,question,answer,topic\nq1,How do I install?,"Run the installer, then restart.",setup\n'
        'q2,Where are settings?,"In the TOML file\nin your home directory.",config\n',
    )


def tsv_file(tmp: Path) -> Path:
    return write(tmp / "glossary.tsv", "term\ttext\nBM25\tA ranking function for search.\n")


def jsonl_file(tmp: Path) -> Path:
    rows = [
        {"slug": "a", "body": "Glaciers carve valleys.", "kind": "geo"},
        {"body": "Rivers flow."},
    ]
    return write(tmp / "facts.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def pdf_file(tmp: Path, name: str = "report.pdf", pages: list[list[str]] | None = None) -> Path:
    pytest.importorskip("reportlab")
    from reportlab.pdfgen import canvas

    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path))
    c.setTitle("Annual report")
    for lines in PDF_PAGES if pages is None else pages:
        y = 780
        for line in lines:
            c.drawString(72, y, line)
            y -= 16
        c.showPage()
    c.save()
    return path


def scanned_pdf(tmp: Path) -> Path:
    """A PDF with a picture and no text layer, as a scanner writes one."""
    pytest.importorskip("reportlab")
    from reportlab.pdfgen import canvas

    path = tmp / "scan.pdf"
    c = canvas.Canvas(str(path))
    c.rect(100, 100, 300, 400, fill=1)
    c.showPage()
    c.save()
    return path


def damaged_pdf(tmp: Path) -> Path:
    path = tmp / "broken.pdf"
    path.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage, cut short")
    return path


def docx_file(tmp: Path) -> Path:
    pytest.importorskip("docx")
    import docx

    d = docx.Document()
    d.core_properties.title = "Meeting minutes"
    d.add_heading("Decisions", 1)
    d.add_paragraph("The team chose PostgreSQL for the new service.")
    d.add_heading("Budget", 2)
    d.add_paragraph("The budget for hardware is ten thousand euros.")
    table = d.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Owner"
    table.cell(0, 1).text = "Grace"
    path = tmp / "minutes.docx"
    d.save(str(path))
    return path


def broken_files(root: Path) -> dict[str, str]:
    """Files a folder walk must skip, each with the category it is counted under."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "empty.md").write_bytes(b"")
    (root / "blank.txt").write_bytes(b"  \n\n")
    (root / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.md").write_bytes("# Caf\xe9\n\nCr\xe8me br\xfbl\xe9e.\n".encode("latin-1"))
    (root / "photo.png").write_bytes(b"\x89PNG")
    damaged_pdf(root)
    scanned_pdf(root)
    return {
        "empty.md": "empty file",
        "blank.txt": "empty file",
        "image.md": "binary file",
        "latin1.md": "not UTF-8",
        "photo.png": "unsupported .png",
        "broken.pdf": "damaged PDF",
        "scan.pdf": "no text layer (scanned PDF)",
    }


def folder(root: Path) -> Path:
    """One file of each readable type, some in a subfolder."""
    md_file(root)
    rst_file(root / "docs")
    html_file(root / "web")
    csv_file(root)
    tsv_file(root)
    jsonl_file(root)
    write(root / "todo.txt", "Buy milk.\n\nCall the plumber about the leak.\n")
    pdf_file(root)
    docx_file(root)
    return root
