"""The search page served at ``/``: one self-contained HTML document.

Inline CSS and script, no external assets.  The few server values in it (index name,
kind, units, reader) are HTML-escaped here; the script builds results with ``textContent``
and ``createElement`` only, so no question or corpus text is ever parsed as HTML.

When the server has a reader (``info["reader"]``), each search also asks for the top read
answer (``unit=answer&k=1``, a second request beside the hits') and shows it above the
hits in ``#answer``: the answer marked inside its sentence, with the passage title.  The
unit switch has the index's own units and, with a reader, ``answer``: the answer above
and the passages retrieved below, the answer's passage moved first (its answer marked).
At the other units the hits of the answer's passage are marked, and the answer box says
which hit it came from, or that its passage is not among the hits.

Each hit is headed by its ``citation`` ("file › heading · page N" for a passage read from
a file, else its title), then says where it is: its passage id, its character offsets in
its document, the file, page and heading path of a passage read from a file, and a "Copy
citation" button (the citation, id and offsets as one line).  Its passage's metadata
(``meta``: its document's fields) follows compactly, as ``field value`` chips
(``start``/``end``, the passage's offsets, the provenance shown above and the file's hash
left out; long values cut), built as text like the rest.  The filter field takes what
``GET /v1/search``'s ``filter`` does: a JSON object, or ``FIELD=VALUE`` items separated by
spaces; it is kept in the address with the question and unit (``?q=...&unit=...`` fills
the form and searches at once).  A server with an API key gets a key field, which the
address's fragment fills (``#key=KEY``: never sent to the server as part of the address);
each request sends it as ``X-API-Key``.
"""

from __future__ import annotations

import html
import json
from typing import Any

_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>anygrain · __INDEX__</title>
<style>
  :root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --accent:#2f5bd3; --mark:#ffe58a; }
  * { box-sizing: border-box; }
  body { margin:0; font:16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
         color:var(--fg); background:#f7f8fa; }
  header { background:#fff; border-bottom:1px solid var(--line); padding:14px 24px; }
  header h1 { margin:0; font-size:20px; }
  header .meta { color:var(--muted); font-size:13px; }
  main { max-width:860px; margin:0 auto; padding:20px 24px 48px; }
  form { display:flex; gap:8px; flex-wrap:wrap; align-items:center; }
  #q { flex:1 1 420px; font-size:17px; padding:10px 12px; border:1px solid #c9ced6;
       border-radius:8px; }
  #q:focus { outline:2px solid var(--accent); border-color:transparent; }
  button { font-size:16px; padding:10px 18px; border:0; border-radius:8px;
           background:var(--accent); color:#fff; cursor:pointer; }
  fieldset { border:0; margin:10px 0 0; padding:0; display:flex; gap:6px; flex-wrap:wrap; }
  fieldset label { border:1px solid #c9ced6; border-radius:999px; padding:3px 12px;
                   font-size:14px; cursor:pointer; background:#fff; }
  fieldset input { margin:0 5px 0 0; }
  fieldset label:has(input:checked) { border-color:var(--accent); background:#eaf0ff; }
  #filter { flex:1 1 100%; font:14px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace;
            padding:6px 10px; border:1px solid #c9ced6; border-radius:8px; margin-top:8px; }
  #status { color:var(--muted); font-size:14px; margin:14px 0 6px; min-height:1.5em; }
  #status.error { color:#b42318; }
  ol { list-style:none; margin:0; padding:0; }
  li.hit { background:#fff; border:1px solid var(--line); border-radius:10px;
           padding:12px 16px; margin:10px 0; }
  .hit .head { display:flex; justify-content:space-between; gap:12px; font-size:14px; }
  .hit .title { font-weight:600; }
  .hit .score { color:var(--muted); font-variant-numeric:tabular-nums; }
  .hit .answer { font-size:18px; font-weight:600; margin:4px 0; }
  .hit .text { margin:4px 0 0; color:#344054; white-space:pre-wrap; }
  .hit .meta { display:flex; flex-wrap:wrap; gap:4px 6px; margin:8px 0 0; font-size:12.5px; }
  .hit .meta .field { background:#f2f4f7; border-radius:4px; padding:1px 6px; color:#344054;
                      overflow-wrap:anywhere; }
  .hit .meta .key { color:var(--muted); }
  .hit .where { display:flex; flex-wrap:wrap; gap:4px 10px; align-items:center; margin:6px 0 0;
                font-size:12.5px; color:var(--muted); }
  .hit .where .id { font-family:ui-monospace, SFMono-Regular, Menlo, monospace; }
  .hit .where button { font-size:12px; padding:2px 8px; border-radius:6px; background:#eaf0ff;
                       color:var(--accent); }
  li.hit[data-answer] { border-color:var(--accent); }
  .hit .badge { background:var(--accent); color:#fff; border-radius:4px; padding:0 6px;
                font-size:12px; margin-right:6px; }
  #answer .agree { color:var(--muted); font-size:13px; margin-top:4px; }
  #answer .agree.apart { color:#b54708; }
  #key { flex:0 1 220px; font-size:14px; padding:6px 10px; border:1px solid #c9ced6;
         border-radius:8px; }
  mark { background:var(--mark); padding:0 2px; border-radius:3px; font-weight:600; }
  #answer { background:#fff; border:1px solid var(--accent); border-left-width:4px;
            border-radius:10px; padding:12px 16px; margin:10px 0 4px; }
  #answer .label { color:var(--muted); font-size:13px; text-transform:uppercase;
                   letter-spacing:.04em; }
  #answer .answer { font-size:20px; font-weight:600; margin:2px 0 4px; }
  #answer .sentence { margin:4px 0; color:#344054; white-space:pre-wrap; }
  #answer .source { color:var(--muted); font-size:14px; }
  #answer .source .title { font-weight:600; color:var(--fg); }
  #answer.pending, #answer.failed { color:var(--muted); font-size:14px; border-color:var(--line); }
</style>
</head>
<body>
<header>
  <h1>anygrain</h1>
  <div class="meta">__INDEX__ · __KIND__ index · __PASSAGES__ passages</div>
</header>
<main>
  <form id="search" autocomplete="off">
    <input id="q" name="q" type="search" placeholder="Ask a question" autofocus
           maxlength="__MAXLEN__" aria-label="Question">
    <button id="go" type="submit">Search</button>
    <fieldset id="units" aria-label="Unit">__UNITS__</fieldset>__KEYFIELD__
    <input id="filter" name="filter" type="text" spellcheck="false"
           placeholder='Filter on metadata: lang=fr year=2001,2002 or {"year": {"$gte": 2001}}'
           aria-label="Metadata filter">
  </form>
  <section id="answer" aria-label="Read answer" aria-live="polite" hidden></section>
  <div id="status" role="status"></div>
  <ol id="results"></ol>
</main>
<script>
"use strict";
const form = document.getElementById("search");
const input = document.getElementById("q");
const filterInput = document.getElementById("filter");
const statusEl = document.getElementById("status");
const results = document.getElementById("results");
const answerBox = document.getElementById("answer");
const keyInput = document.getElementById("key");
const K = __K__;
// Whether the server has a reader: then each search also shows the top read answer.
const READER = __READER__;
// Whether the API wants a key: the page sends the key field's as X-API-Key.
const KEYED = __KEYED__;
let asked = 0;  // the latest search: a slower earlier response must not overwrite it
// the latest search's unit and its two responses, which agree() reconciles
let shown = { unit: "", hits: null, answer: null };

function headers() {
  const h = { Accept: "application/json" };
  const key = KEYED ? String(keyInput.value || "").trim() : "";
  if (key) h["X-API-Key"] = key;
  return h;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setStatus(text, isError) {
  statusEl.textContent = text;
  statusEl.className = isError ? "error" : "";
}

// A hit's metadata, compactly: one "field value" chip each, as text (start/end, the
// passage's offsets in its document, what the citation says and the file's hash left
// out; long values cut).
const CITED = ["start", "end", "source", "page", "headings", "line", "format", "sha256"];
function renderMeta(meta) {
  const fromFile = meta && typeof meta.sha256 === "string";
  const keys = Object.keys(meta || {}).filter(
    (k) => k !== "start" && k !== "end" && !(fromFile && CITED.includes(k)));
  if (!keys.length) return null;
  const box = el("div", "meta");
  for (const k of keys) {
    const v = meta[k];
    let s = typeof v === "string" ? v : JSON.stringify(v);
    if (s.length > 80) s = s.slice(0, 79) + "…";
    const chip = el("span", "field");
    chip.title = k;
    chip.append(el("span", "key", k), document.createTextNode(" " + s));
    box.append(chip);
  }
  return box;
}

function passageText(before, answer, after) {
  const p = el("p", "text");
  p.append(document.createTextNode(before));
  if (answer) p.append(el("mark", "", answer));
  p.append(document.createTextNode(after));
  return p;
}

// What a "Copy citation" button copies: where the hit is, its id and offsets, one line.
function citationOf(h) {
  let s = (h.citation || h.title) + " [" + h.passage_id;
  if (h.char_start !== null && h.char_start !== undefined) {
    s += ", chars " + h.char_start + "–" + h.char_end;
  }
  return s + "]";
}

async function copyCitation(button) {
  const text = button.dataset.citation;
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {  // no clipboard API here (an insecure origin): a selected textarea's copy
    const t = el("textarea");
    t.value = text;
    document.body.append(t);
    t.select();
    const ok = document.execCommand("copy");
    t.remove();
    if (!ok) { button.textContent = "Copy failed"; return; }
  }
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = "Copy citation"; }, 1500);
}

// Where a hit is: its passage id, its offsets in its document, a file's provenance.
function renderWhere(h) {
  const box = el("div", "where");
  box.append(el("span", "id", "id " + h.passage_id));
  if (h.char_start !== null && h.char_start !== undefined) {
    box.append(el("span", "offsets", "chars " + h.char_start + "–" + h.char_end));
  }
  const m = h.meta || {};
  if (typeof m.sha256 === "string" && typeof m.source === "string") {
    box.append(el("span", "source", "file " + m.source));
    if (Number.isInteger(m.page)) box.append(el("span", "page", "page " + m.page));
    if (Number.isInteger(m.line)) box.append(el("span", "line", "line " + m.line));
    if (Array.isArray(m.headings) && m.headings.length) {
      box.append(el("span", "headings", m.headings.map(String).join(" › ")));
    }
  }
  const b = el("button", "cite", "Copy citation");
  b.type = "button";
  b.dataset.citation = citationOf(h);
  b.addEventListener("click", () => copyCitation(b));
  box.append(b);
  return box;
}

function render(data, roundTripMs) {
  results.replaceChildren();
  for (const h of data.hits) {
    const li = el("li", "hit");
    li.dataset.unit = h.unit;
    li.dataset.passageId = h.passage_id;
    const head = el("div", "head");
    head.append(el("span", "title", h.rank + ". " + (h.citation || h.title)));
    head.append(el("span", "score", "score " + h.score.toFixed(3)));
    li.append(head);
    if (h.answer && h.unit === "phrase") li.append(el("div", "answer", h.answer));
    li.append(passageText(h.before, h.answer, h.after));
    li.append(renderWhere(h));
    const meta = renderMeta(h.meta);
    if (meta) li.append(meta);
    results.append(li);
  }
  const n = data.hits.length;
  const answering = shown.unit === "answer";  // the list: the passages the answer is from
  const what = answering ? (n === 1 ? " passage" : " passages") : (n === 1 ? " hit" : " hits");
  setStatus(n + what + " (" + (shown.unit || data.unit) + ") · server " +
            data.latency_ms.toFixed(1) + " ms · round trip " + roundTripMs.toFixed(0) + " ms");
  shown.hits = data;
  agree();
}

// The answer box and the list agree: at the answer grain the answer's passage goes first
// in the list, its answer marked; at the others its hits are marked and the box says which
// hit it came from.  Where its passage is not among the hits, the box says so.
function agree() {
  if (!shown.hits || !shown.answer) return;  // until both responses are in
  const top = shown.answer.hits[0];
  if (!top || top.unit !== "answer") return;  // no answer read: nothing to agree on
  const cards = Array.from(results.querySelectorAll("li.hit"));
  const first = cards.findIndex((c) => c.dataset.passageId === top.passage_id);
  const note = el("div", "agree");
  if (first < 0) {
    note.className = "agree apart";
    note.textContent = "Its passage (" + top.passage_id + ") is not among the hits below.";
    answerBox.append(note);
    return;
  }
  for (const c of cards) {
    if (c.dataset.passageId !== top.passage_id) continue;
    c.dataset.answer = "1";
    c.querySelector(".head").prepend(el("span", "badge", "answer"));
  }
  if (shown.unit === "answer") {
    const card = cards[first];
    const chars = Array.from(top.text);
    const [a, b] = top.span;
    card.querySelector("p.text").replaceWith(
      passageText(cut(chars, 0, a), cut(chars, a, b), cut(chars, b, chars.length)));
    results.prepend(card);
    note.textContent = "From the first passage below" +
      (first > 0 ? " (retrieved " + (first + 1) + ")." : ".");
  } else if (first === 0) {
    note.textContent = "From the first hit below.";
  } else {
    note.className = "agree apart";
    note.textContent = "From hit " + (first + 1) + " below, not the first.";
  }
  answerBox.append(note);
}

// Spans count Unicode code points (Python's str); JavaScript strings count UTF-16 units.
function cut(chars, a, b) { return chars.slice(a, b).join(""); }

function showAnswer(text, cls) {
  answerBox.replaceChildren(el("div", "label", text));
  answerBox.className = cls;
  answerBox.hidden = false;
}

function renderAnswer(data) {
  const h = data.hits[0];
  if (h && h.unit === "passage") {  // below min_confidence: the passages read, as evidence
    showAnswer("Not found in these documents (confidence " +
               (h.confidence || 0).toFixed(2) + "); the passages read:", "failed");
    for (const p of data.hits) answerBox.append(el("div", "source", p.citation || p.title));
    return;
  }
  if (!h || !h.span) { showAnswer("No answer read.", "failed"); return; }
  const chars = Array.from(h.text);
  const [a, b] = h.span;
  let [s, e] = h.sentence || h.span;
  if (!(s <= a && b <= e)) { s = a; e = b; }
  answerBox.replaceChildren();
  answerBox.className = "";
  answerBox.append(el("div", "label", "Answer"));
  answerBox.append(el("div", "answer", cut(chars, a, b)));
  const p = el("p", "sentence");
  p.append(document.createTextNode(cut(chars, s, a)));
  p.append(el("mark", "", cut(chars, a, b)));
  p.append(document.createTextNode(cut(chars, b, e)));
  answerBox.append(p);
  const src = el("div", "source");
  src.append(el("span", "title", h.citation || h.title));
  let scores = " · score " + h.score.toFixed(3);
  if (h.confidence !== null && h.confidence !== undefined) {
    scores += " · confidence " + h.confidence.toFixed(2);
  }
  if (h.reader_score !== null && h.retrieval_score !== null) {
    scores += " (reader " + h.reader_score.toFixed(2) + ", retrieval " +
              h.retrieval_score.toFixed(2) + ")";
  }
  src.append(document.createTextNode(scores + " · " + data.latency_ms.toFixed(1) + " ms"));
  answerBox.append(src);
  answerBox.hidden = false;
}

async function readAnswer(q, filter, n) {
  showAnswer("Reading…", "pending");
  const params = new URLSearchParams({ q: q, unit: "answer", k: "1" });
  if (filter) params.set("filter", filter);
  // the page's own ?min_confidence=X: below it, "not found in these documents"
  const floor = new URLSearchParams(location.search).get("min_confidence");
  if (floor) params.set("min_confidence", floor);
  try {
    const r = await fetch("v1/search?" + params.toString(), { headers: headers() });
    const data = await r.json();
    if (n !== asked) return;
    if (!r.ok) { showAnswer("No answer: " + (data.error || ("HTTP " + r.status)), "failed"); return; }
    renderAnswer(data);
    shown.answer = data;
    agree();
  } catch (e) {
    if (n === asked) showAnswer("No answer: request failed: " + e, "failed");
  }
}

async function search(ev) {
  ev.preventDefault();
  const q = input.value.trim();
  if (!q) { setStatus("Type a question first.", true); return; }
  const n = ++asked;
  const unit = (form.querySelector("input[name=unit]:checked") || {}).value;
  const filter = filterInput.value.trim();
  shown = { unit: unit || "", hits: null, answer: null };
  const params = new URLSearchParams({ q: q, k: String(K) });
  // the answer grain: the answer above (readAnswer), the passages it is read from below
  if (unit) params.set("unit", unit === "answer" ? "passage" : unit);
  if (filter) params.set("filter", filter);
  const address = new URLSearchParams({ q: q });
  if (unit) address.set("unit", unit);
  if (filter) address.set("filter", filter);
  const floor = new URLSearchParams(location.search).get("min_confidence");
  if (floor) address.set("min_confidence", floor);
  history.replaceState(null, "", "?" + address);
  setStatus("Searching…", false);
  if (READER) readAnswer(q, filter, n);  // beside the hits' request, shown above them
  const t0 = performance.now();
  try {
    const r = await fetch("v1/search?" + params.toString(), { headers: headers() });
    const data = await r.json();
    if (n !== asked) return;
    if (!r.ok) { results.replaceChildren(); setStatus(data.error || ("HTTP " + r.status), true); return; }
    render(data, performance.now() - t0);
  } catch (e) {
    if (n !== asked) return;
    results.replaceChildren();
    setStatus("Request failed: " + e, true);
  }
}

form.addEventListener("submit", search);
// A link with ?q=...&unit=...&filter=... (as the address bar shows after each search) asks
// at once.
const start = new URLSearchParams(location.search);
// #key=KEY: the API key, kept out of what the address sends and shows
const fragment = new URLSearchParams(String(location.hash || "").slice(1));
if (KEYED && fragment.get("key")) {
  keyInput.value = fragment.get("key");
  history.replaceState(null, "", "?" + start);
}
if (start.get("filter")) filterInput.value = start.get("filter");
for (const r of form.querySelectorAll("input[name=unit]")) {
  if (r.value === start.get("unit")) r.checked = true;
}
if (start.get("q")) { input.value = start.get("q"); form.requestSubmit(); }
for (const r of form.querySelectorAll("input[name=unit]")) {
  r.addEventListener("change", () => { if (input.value.trim()) form.requestSubmit(); });
}
</script>
</body>
</html>
"""


def render(info: dict[str, Any], *, k: int = 10, keyed: bool = False) -> str:
    """The page for an index described by ``SearchService.info()``; ``keyed``: the API
    wants a key (the page gets a field for it).  With a reader, every search shows its
    answer above the hits, and the answer grain is the last unit switch."""
    units = "".join(
        f'<label><input type="radio" name="unit" value="{html.escape(u)}"'
        f"{' checked' if u == info['default_unit'] else ''}>{html.escape(u)}</label>"
        for u in info["units"]
        if u != "answer" or info.get("reader")
    )
    key_field = (
        '\n    <input id="key" name="key" type="password" placeholder="API key" '
        'autocomplete="off" aria-label="API key">'
        if keyed
        else ""
    )
    n_passages = (info.get("corpus") or {}).get("n_passages", "?")
    values = {
        "__INDEX__": html.escape(str(info["index"])),
        "__KIND__": html.escape(str(info["kind"])),
        "__PASSAGES__": html.escape(f"{n_passages:,}" if isinstance(n_passages, int) else "?"),
        "__MAXLEN__": str(int(info["limits"]["max_question_chars"])),
        "__UNITS__": units,
        "__K__": json.dumps(int(k)),
        "__READER__": json.dumps(bool(info.get("reader"))),
        "__KEYED__": json.dumps(bool(keyed)),
        "__KEYFIELD__": key_field,
    }
    out = _TEMPLATE
    for key, v in values.items():
        out = out.replace(key, v)
    return out
