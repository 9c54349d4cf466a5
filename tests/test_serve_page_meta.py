"""The search page's metadata and filter: each hit's ``meta`` shown compactly as text (a
value holding ``<script>`` stays text), and a filter field taking what ``GET /search``'s
``filter`` takes (JSON, or ``FIELD=VALUE`` items), kept in the address.  Statically, through
the page's own script on a minimal DOM under Node, and in headless Chromium (each skipped
with a reason when its tool is missing)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (the dev extra)")

from fastapi.testclient import TestClient  # noqa: E402

from anygrain import Index  # noqa: E402
from anygrain.serve import create_app  # noqa: E402

EVIL = "<script>alert(1)</script>"
DOCS = [
    {"id": f"d{i}", "title": f"T{i}", "text": text, "lang": lang, "year": 2000 + i}
    for i, (text, lang) in enumerate(
        [
            ("Python is a programming language created by Guido van Rossum.", "en"),
            ("Python est un langage de programmation créé par Guido van Rossum.", "fr"),
            ("The Great Wall of China is about 21,196 kilometres long.", "en"),
            ("Python code uses indentation to delimit blocks.", "de"),
        ]
    )
]
DOCS.append(
    {
        "id": "evil",
        "title": "<b>Evil</b>",
        "text": "Python snakes are not a programming language.",
        "lang": EVIL,
        "tags": ["a", "b"],
    }
)
QUESTION = "Python programming language"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    root = tmp_path_factory.mktemp("serve-page")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(str(root / "docs.jsonl"), kind="bm25", out=root / "bm25", progress=False)


def test_the_page_shows_metadata_as_text_and_takes_a_filter(index: Index) -> None:
    client = TestClient(create_app(index.path, warm_up=False))
    page = client.get("/").text
    assert 'id="filter"' in page
    assert "renderMeta" in page
    script = page[page.index("<script>") : page.rindex("</script>")]
    # every corpus value reaches the page as text nodes, never parsed as HTML
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    # the hit whose metadata holds markup comes back as JSON data, for textContent
    r = client.get("/search", params={"q": "snakes", "k": 1})
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["hits"][0]["meta"]["lang"] == EVIL


def test_the_page_escapes_metadata_in_a_browser_like_run(index: Index) -> None:
    """The page's own script, run by Node on a minimal DOM: a hit whose metadata and title
    hold markup renders them as text (no element is made from them)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    client = TestClient(create_app(index.path, warm_up=False))
    page = client.get("/").text
    script = page[page.index("<script>") + len("<script>") : page.rindex("</script>")]
    data = client.get("/search", params={"q": "snakes", "k": 1}).json()
    harness = DOM_SHIM + script + f"\nrender({json.dumps(data)}, 1);\nconsole.log(dump());\n"
    out = subprocess.run(
        [node, "-e", harness], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert "script" not in made["tags"] and "b" not in made["tags"]
    assert " " + EVIL in made["texts"] and "lang" in made["texts"]


# Just enough DOM for the page's script: elements record their tag and text; setting
# innerHTML throws, so the test fails if the page ever parses data as HTML.
DOM_SHIM = r"""
const tags = [], texts = [];
class Node_ {
  constructor(tag) { this.tag = tag; this.children = []; this.dataset = {}; this.className = "";
                     this.hidden = false; this._text = ""; if (tag) tags.push(tag); }
  set textContent(t) { this._text = String(t); texts.push(this._text); }
  get textContent() { return this._text; }
  set innerHTML(_) { throw new Error("innerHTML used"); }
  append(...xs) { for (const x of xs) this.children.push(typeof x === "string" ? text(x) : x); }
  replaceChildren(...xs) { this.children = []; this.append(...xs); }
  addEventListener() {}
  querySelector() { return null; }
  querySelectorAll() { return []; }
  requestSubmit() {}
  setAttribute(k, v) { this[k] = v; }
}
function text(t) { const n = new Node_(null); n.textContent = t; return n; }
const byId = {};
const document = {
  getElementById(id) { return byId[id] || (byId[id] = new Node_("div")); },
  createElement(tag) { return new Node_(tag); },
  createTextNode(t) { return text(t); },
};
const location = { search: "" };
const history = { replaceState() {} };
const performance = { now() { return 0; } };
function dump() { return JSON.stringify({ tags: tags, texts: texts }); }
"""


# --- headless Chromium (as tests/test_serve_browser.py) ----------------------------------
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def server(index: Index) -> Iterator[str]:
    uvicorn = pytest.importorskip("uvicorn", reason="anygrain serve needs uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = uvicorn.Config(create_app(index), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.time() + 30
    while not srv.started:
        if time.time() > deadline or not t.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    srv.should_exit = True
    t.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (dev extra)")
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y ...)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(f)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    except WebDriverException as e:
        pytest.skip(f"chromium did not start: {e.msg}")
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_the_page_in_a_browser_shows_metadata_and_filters(
    server: str, browser: Any, index: Index
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def shown() -> list[str]:  # read in one script: the results may be replaced meanwhile
        return list(
            browser.execute_script(
                "return Array.from(document.querySelectorAll('#results li.hit .title'), "
                "(e) => e.textContent)"
            )
        )

    def titles(spec: dict[str, Any] | None) -> list[str]:
        hits = index.search([QUESTION], 10, filter=spec)[0]
        return [f"{i}. {h.title}" for i, h in enumerate(hits, 1)]

    browser.get(server)
    box = browser.find_element(By.ID, "q")
    box.send_keys(QUESTION, Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda d: shown() == titles(None))
    # the metadata, as text: the markup in a value and a title makes no element
    evil = next(
        e for e in browser.find_elements(By.CSS_SELECTOR, "#results li.hit") if "Evil" in e.text
    )
    chips = [c.text for c in evil.find_elements(By.CSS_SELECTOR, ".meta .field")]
    assert chips == [f"lang {EVIL}", 'tags ["a","b"]']  # start/end left out
    assert not browser.find_elements(By.CSS_SELECTOR, "#results script, #results b")
    # a filter typed in the field: FIELD=VALUE items, then JSON; kept in the address
    field = browser.find_element(By.ID, "filter")
    field.send_keys("lang=fr,de", Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda d: shown() == titles({"lang": ["fr", "de"]}))
    assert "filter=lang%3Dfr%2Cde" in browser.current_url
    field.clear()
    field.send_keys('{"year": {"$gte": 2003}}', Keys.ENTER)
    want = titles({"year": {"$gte": 2003}})
    WebDriverWait(browser, 30).until(lambda d: shown() == want)
    # a link with a filter fills the field and searches at once
    browser.get(server + "?q=" + quote(QUESTION) + "&filter=" + quote("lang=en"))
    WebDriverWait(browser, 30).until(lambda d: shown() == titles({"lang": "en"}))
    assert browser.find_element(By.ID, "filter").get_attribute("value") == "lang=en"
    # a bad filter shows the server's error
    field = browser.find_element(By.ID, "filter")
    field.clear()
    field.send_keys("oops", Keys.ENTER)
    WebDriverWait(browser, 30).until(
        lambda d: "FIELD=VALUE" in d.find_element(By.ID, "status").text
    )
