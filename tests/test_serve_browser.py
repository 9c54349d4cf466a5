"""The search page in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven by Selenium, against uvicorn on 127.0.0.1 over a tiny phrase index,
and over a BM25 index of Markdown files with the shipped reader (the answer grain: the
README's Super Bowl question; skipped where no English reader ships).

Skips when fastapi/uvicorn, selenium, chromium or chromedriver is missing.  Set
``ANYGRAIN_SCREENSHOT=PATH`` to save a screenshot of the page with its answers.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="anygrain serve needs fastapi (./install.sh installs it)")
pytest.importorskip("uvicorn", reason="anygrain serve needs uvicorn")
pytest.importorskip("selenium", reason="the browser test needs selenium (the dev extra)")

import torch
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait
from test_phrase_helpers import PARAGRAPHS, make_tiny_model, write_squad

from anygrain.index.base import Index
from anygrain.models.shipped import reader_ships
from anygrain.phrase import PhraseEncoder
from anygrain.serve import create_app

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-dev-shm-usage",
    "--window-size=1100,860",
]
MARKUP = "Tags like <b>bold</b> and <script>alert(1)</script> stay text & so do &amp; entities."
QUESTION = "Who created Python?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    paras = [*PARAGRAPHS, ("Markup <i>", MARKUP, [("What stays text?", "Tags")])]
    squad = write_squad(tmp_path_factory.mktemp("data") / "tiny.json", paras)
    tiny = make_tiny_model(tmp_path_factory.mktemp("tiny-bert"))
    torch.manual_seed(0)
    m = PhraseEncoder.from_pretrained(
        tiny, max_passage_length=40, doc_stride=10, max_phrase_words=4
    )
    model_dir = m.save(tmp_path_factory.mktemp("phrase-model") / "m")
    out = tmp_path_factory.mktemp("idx") / "tiny-squad-phrase"
    # half the vectors: every passage of the tiny fixture keeps some, so each can be shown
    return Index.build(
        f"squad:{squad}",
        kind="phrase",
        out=out,
        model=str(model_dir),
        compress="sq8",
        keep=0.5,
        progress=False,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serving(app: Any) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
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
def server(index: Index) -> Iterator[str]:
    yield from serving(create_app(index))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y ...)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    except WebDriverException as e:
        pytest.skip(f"chromium did not start: {e.msg}")
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def ask(driver: Any, question: str) -> None:
    box = driver.find_element(By.ID, "q")
    box.clear()
    box.send_keys(question)
    box.send_keys(Keys.ENTER)


def wait_for_hits(driver: Any, unit: str) -> list[Any]:
    # the status line reports the unit once the new results are in
    WebDriverWait(driver, 30).until(
        EC.text_to_be_present_in_element((By.ID, "status"), f"({unit})")
    )
    return driver.find_elements(By.CSS_SELECTOR, "#results li.hit")


def test_question_gets_highlighted_answers(server: str, browser: Any, index: Index) -> None:
    browser.get(server)
    assert "anygrain" in browser.title
    radios = browser.find_elements(By.CSS_SELECTOR, "input[name=unit]")
    # with a reader (one ships for English), the answer grain is the last switch
    assert [r.get_attribute("value") for r in radios] == [
        "phrase",
        "sentence",
        "passage",
        "document",
        *(["answer"] if reader_ships("en") else []),
    ]
    ask(browser, QUESTION)
    hits = wait_for_hits(browser, "phrase")
    want = index.search([QUESTION], 10)[0]
    assert len(hits) == len(want) > 0
    marks = browser.find_elements(By.CSS_SELECTOR, "#results li.hit mark")
    assert [m.text for m in marks] == [h.answer_text.strip() for h in want]
    first = hits[0]
    assert first.find_element(By.CSS_SELECTOR, "p.text").text == want[0].text.strip()
    assert first.find_element(By.CSS_SELECTOR, ".title").text == f"1. {want[0].title}"
    assert f"{want[0].score:.3f}" in first.find_element(By.CSS_SELECTOR, ".score").text
    status = browser.find_element(By.ID, "status").text
    assert "server" in status and "ms" in status
    if os.environ.get("ANYGRAIN_SCREENSHOT"):
        browser.save_screenshot(os.environ["ANYGRAIN_SCREENSHOT"])


def test_unit_switch_and_corpus_markup_stays_text(server: str, browser: Any, index: Index) -> None:
    browser.get(server)
    ask(browser, "What stays text?")
    wait_for_hits(browser, "phrase")
    browser.find_element(By.CSS_SELECTOR, "input[value=passage]").click()  # searches again
    hits = wait_for_hits(browser, "passage")
    want = index.search(["What stays text?"], 10, unit="passage")[0]
    assert [h.find_element(By.CSS_SELECTOR, "p.text").text for h in hits] == [h.text for h in want]
    assert not browser.find_elements(By.CSS_SELECTOR, "#results mark")  # passages: no answer
    assert MARKUP in [h.text for h in want], "the markup passage should be among the hits"
    # corpus text with tags is shown as text, never parsed into elements
    assert any(h.find_element(By.CSS_SELECTOR, "p.text").text == MARKUP for h in hits)
    assert not browser.find_elements(By.CSS_SELECTOR, "#results b, #results script, #results i")
    assert "Markup <i>" in browser.find_element(By.ID, "results").text


def test_refused_question_shows_the_error(server: str, browser: Any) -> None:
    browser.get(server)
    browser.execute_script("document.getElementById('q').removeAttribute('maxlength')")
    ask(browser, "x" * 1001)
    WebDriverWait(browser, 30).until(
        EC.text_to_be_present_in_element((By.ID, "status"), "too long")
    )
    assert browser.find_element(By.ID, "status").get_attribute("class") == "error"
    assert not browser.find_elements(By.CSS_SELECTOR, "#results li")


def test_link_with_question_and_unit_searches_at_once(
    server: str, browser: Any, index: Index
) -> None:
    browser.get(server + "?q=Who+created+Python%3F&unit=sentence")
    hits = wait_for_hits(browser, "sentence")
    want = index.search([QUESTION], 10, unit="sentence")[0]
    assert len(hits) == len(want)
    marks = browser.find_elements(By.CSS_SELECTOR, "#results mark")
    assert marks[0].text == want[0].answer_text.strip()
    assert browser.find_element(By.ID, "q").get_attribute("value") == QUESTION
    assert browser.find_element(By.CSS_SELECTOR, "input[value=sentence]").is_selected()
    # each search puts its question and unit in the address, so it can be shared
    ask(browser, "How long is the Great Wall?")
    WebDriverWait(browser, 30).until(EC.url_contains("q=How+long+is+the+Great+Wall"))
    assert "unit=sentence" in browser.current_url


# --- the answer grain: the README's question, the shipped reader ------------------------
SUPER_BOWL = "Which NFL team represented the AFC at Super Bowl 50?"
FILES = {
    # BM25 ranks this one first (it repeats the question's words), yet holds no answer
    "faq.md": "# Fan questions\n\n## Teams\n\nWhich NFL team represented the AFC at "
    "Super Bowl 50? Fans of the NFL asked which team represented the AFC at Super Bowl 50 "
    "for weeks.\n",
    "super-bowl-50.md": "# Super Bowl 50\n\n## The game\n\nSuper Bowl 50 was an American "
    "football game to determine the champion of the National Football League (NFL) for "
    "the 2015 season. The American Football Conference (AFC) champion Denver Broncos "
    "defeated the National Football Conference (NFC) champion Carolina Panthers 24–10 to "
    "earn their third Super Bowl title.\n",
    "python.md": "# Python\n\nPython is a programming language created by Guido van Rossum.\n",
}


@pytest.fixture(scope="module")
def docs_index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    if not reader_ships("en"):
        pytest.skip("no English reader ships with this install")
    root = tmp_path_factory.mktemp("answer-docs")
    folder = root / "docs"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return Index.build(str(folder), kind="bm25", out=root / "bm25", progress=False)


@pytest.fixture(scope="module")
def answer_server(docs_index: Index) -> Iterator[str]:
    yield from serving(create_app(docs_index, reader="reader-minilm"))


def open_and_wait(browser: Any, url: str) -> list[Any]:
    """The page at ``url``; the hits once the answer box and the list have agreed."""
    browser.get(url)
    WebDriverWait(browser, 60).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#answer .agree")
            and d.find_elements(By.CSS_SELECTOR, "#results li.hit")
        )
    )
    return browser.find_elements(By.CSS_SELECTOR, "#results li.hit")


def test_answer_grain_agrees_with_the_answer_box(
    answer_server: str, browser: Any, docs_index: Index
) -> None:
    retrieved = docs_index.search([SUPER_BOWL], 10)[0]
    answer_passage = next(h for h in retrieved if "Denver" in h.text)
    hits = open_and_wait(browser, answer_server + "?q=" + quote(SUPER_BOWL) + "&unit=answer")
    assert browser.find_element(By.CSS_SELECTOR, "#answer .answer").text == "Denver Broncos"
    assert browser.find_element(By.ID, "q").get_attribute("value") == SUPER_BOWL
    assert browser.find_element(By.CSS_SELECTOR, "input[value=answer]").is_selected()
    assert len(hits) == len(retrieved)
    first = hits[0]
    # the answer's passage first, its answer marked, though the retriever ranked it lower
    assert retrieved[0].passage_id != answer_passage.passage_id
    assert first.get_attribute("data-passage-id") == answer_passage.passage_id
    assert first.get_attribute("data-answer") == "1"
    assert first.find_element(By.CSS_SELECTOR, "mark").text == "Denver Broncos"
    assert "retrieved 2" in browser.find_element(By.CSS_SELECTOR, "#answer .agree").text
    # where the hit is: id, offsets, file and heading path, and its citation to copy
    where = first.find_element(By.CSS_SELECTOR, ".where").text
    assert f"id {answer_passage.passage_id}" in where
    start, end = answer_passage.char_start, answer_passage.char_end
    assert f"chars {start}–{end}" in where
    assert "file super-bowl-50.md" in where and "Super Bowl 50 › The game" in where
    button = first.find_element(By.CSS_SELECTOR, "button.cite")
    assert button.get_attribute("data-citation") == (
        f"{answer_passage.citation} [{answer_passage.passage_id}, chars {start}–{end}]"
    )
    button.click()
    WebDriverWait(browser, 10).until(lambda d: button.text == "Copied")
    # the address keeps the question and unit
    assert "unit=answer" in browser.current_url and "Super+Bowl+50" in browser.current_url


def test_other_grains_mark_the_hit_the_answer_came_from(
    answer_server: str, browser: Any, docs_index: Index
) -> None:
    hits = open_and_wait(browser, answer_server + "?q=" + quote(SUPER_BOWL) + "&unit=passage")
    # the retriever's order kept; the answer's passage (second) marked, and the box says so
    want = docs_index.search([SUPER_BOWL], 10)[0]
    assert [h.get_attribute("data-passage-id") for h in hits] == [h.passage_id for h in want]
    assert [h.get_attribute("data-answer") for h in hits][:2] == [None, "1"]
    note = browser.find_element(By.CSS_SELECTOR, "#answer .agree")
    assert note.text == "From hit 2 below, not the first."
    assert "apart" in note.get_attribute("class")


def test_the_page_sends_the_api_key_from_the_address(browser: Any, index: Index) -> None:
    for url in serving(create_app(index, api_key="k3y", warm_up=False)):
        browser.get(url + "?q=Who+created+Python%3F&unit=passage#key=k3y")
        wait_for_hits(browser, "passage")  # a 401 would show the error instead
        assert "k3y" not in browser.current_url  # the fragment is dropped once read
        # without it, the server's 401 is shown; typed into the field, the search works
        browser.get(url + "?q=Who+created+Python%3F&unit=passage")
        WebDriverWait(browser, 30).until(
            EC.text_to_be_present_in_element((By.ID, "status"), "X-API-Key")
        )
        browser.find_element(By.ID, "key").send_keys("k3y")
        ask(browser, QUESTION)
        wait_for_hits(browser, "passage")
