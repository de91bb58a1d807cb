"""End to end: ``unirag serve`` as a real process, its page driven in a real headless Chromium.

Type a query -> result cards with loaded images; upload a photo -> the caption and the few-shot
examples it was made from; an invalid upload -> an error in the page; the tabs work from the
keyboard. The screenshot of the page is saved (``UNIRAG_UPDATE_SCREENSHOT=1`` also writes
``docs/serve-screenshot.png``, the picture in the README).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .browser import INSTALL_HINT, LAUNCH_ARGS, find_chromium
from .conftest import PHOTOS

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(demo_index, tmp_path_factory):
    """``unirag serve`` on a free loopback port; yields its base URL, stops it afterwards."""
    port = _free_port()
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "unirag", "serve", "--index", str(demo_index),
                                 "--port", str(port), "--generator", "retrieval:consensus"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"unirag serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"unirag serve did not answer /healthz in time:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def page(server, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        executable = find_chromium(p)
        if executable is None:
            pytest.fail(INSTALL_HINT)
        profile = tmp_path_factory.mktemp("chromium-profile")
        context = p.chromium.launch_persistent_context(str(profile), executable_path=executable, headless=True,
                                                       args=LAUNCH_ARGS, viewport={"width": 1280, "height": 900})
        try:
            pg = context.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(server + "/")
            pg.errors = errors
            yield pg
        finally:
            context.close()


def _loaded_images(pg, selector: str) -> int:
    return pg.eval_on_selector_all(selector, "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).length")


def test_typed_query_shows_result_cards_with_images(page, tmp_path):
    page.get_by_role("tab", name="Search").click()
    page.fill("#search-text", "a dog lying on a bed")
    page.fill("#search-k", "8")
    page.press("#search-text", "Enter")
    cards = page.locator("#search-results .card")
    cards.nth(7).wait_for(timeout=60_000)
    assert cards.count() == 8
    page.wait_for_function("() => [...document.querySelectorAll('#search-results .card img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    assert _loaded_images(page, "#search-results .card img") == 8
    first_caption = cards.nth(0).locator(".card-caption").inner_text()
    assert first_caption and first_caption != "(no caption)"
    assert "score" in cards.nth(0).locator(".card-meta").inner_text()
    assert page.locator("#panel-search .error").is_hidden()
    shot = tmp_path / "serve-screenshot.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("UNIRAG_UPDATE_SCREENSHOT"):
        (REPO / "docs").mkdir(exist_ok=True)
        shutil.copy(shot, REPO / "docs" / "serve-screenshot.png")
    assert page.errors == []


def test_uploaded_photo_gets_caption_and_its_examples(page):
    page.get_by_role("tab", name="Caption this image").click()
    page.set_input_files("#caption-image", str(PHOTOS[3]))
    page.select_option("#caption-mode", "rag")
    page.fill("#caption-k", "4")
    page.get_by_role("button", name="Caption this image").click()
    page.locator("#caption-output").wait_for(state="visible", timeout=60_000)
    caption = page.inner_text("#caption-text").strip()
    examples = page.locator("#caption-examples .card")
    assert examples.count() == 4
    example_captions = [examples.nth(i).locator(".card-caption").inner_text() for i in range(4)]
    # retrieval:consensus returns one of the retrieved captions, shown next to it as an example.
    assert caption in example_captions
    page.wait_for_function("() => [...document.querySelectorAll('#caption-examples .card img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    assert "retrieval:consensus" in page.inner_text("#caption-meta")
    assert page.errors == []


def test_invalid_upload_shows_an_error_in_the_page(page):
    page.get_by_role("tab", name="Caption this image").click()
    page.set_input_files("#caption-image", files=[{"name": "notes.jpg", "mimeType": "image/jpeg",
                                                    "buffer": b"this is not an image at all"}])
    page.get_by_role("button", name="Caption this image").click()
    error = page.locator("#panel-caption .error")
    error.wait_for(state="visible", timeout=30_000)
    text = error.inner_text()
    assert "HTTP 415" in text and "not an image" in text
    assert page.locator("#caption-output").is_hidden()


def test_tabs_work_from_the_keyboard(page):
    page.get_by_role("tab", name="Search").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-caption", "aria-selected") == "true"
    assert page.locator("#panel-caption").is_visible() and page.locator("#panel-search").is_hidden()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.id") == "tab-cir"
    assert page.locator("#panel-cir").is_visible()
    page.keyboard.press("Home")
    assert page.get_attribute("#tab-search", "aria-selected") == "true"
    # Tab from the tab list reaches the search box, Enter submits: no mouse needed.
    page.keyboard.press("Tab")
    page.keyboard.type("kitchen")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector('#search-results .card-caption')"
                           " && /kitchen/i.test(document.querySelector('#search-results').innerText)",
                           timeout=60_000)


def test_composed_retrieval_tab_ranks_pool_images(page):
    page.get_by_role("tab", name="Composed retrieval").click()
    page.set_input_files("#cir-image", str(PHOTOS[0]))
    page.fill("#cir-text", "the same room but with a dog")
    page.fill("#cir-k", "6")
    page.get_by_role("button", name="Find target images").click()
    cards = page.locator("#cir-results .card")
    cards.nth(5).wait_for(timeout=60_000)
    assert cards.count() == 6
    assert "stage: baseline" in page.inner_text("#panel-cir .meta")
    assert page.errors == []
