"""End to end: ``unirag serve`` as a real process, its page driven in a real headless Chromium.

Type a query -> result cards with loaded images; upload a photo -> the caption and the few-shot
examples it was made from; an invalid upload -> an error in the page; the tabs work from the
keyboard; a caption typed in the generate tab -> the generated image and its examples; a photo
dropped on the drop zone (a real ``drop`` event) -> searched; a server started with ``--token-env``
-> the page asks for the token, shows the 401 of a wrong one, and searches with the right one. The screenshot of the page is saved (``UNIRAG_UPDATE_SCREENSHOT=1`` also writes
``docs/serve-screenshot.png``, the picture on the docs' serve page).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .browser import INSTALL_HINT, LAUNCH_ARGS, find_chromium
from .conftest import PHOTOS, serve_process

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser  # the browser layer (tests/layers.py)


@pytest.fixture(scope="module")
def server(demo_index, tmp_path_factory):
    with serve_process(demo_index, tmp_path_factory.mktemp("serve-log"), "--generator", "retrieval:consensus",
                "--image-generator", "retrieval:top1") as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Chromium (persistent context) for the module's pages."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        executable = find_chromium(p)
        if executable is None:
            pytest.fail(INSTALL_HINT)
        profile = tmp_path_factory.mktemp("chromium-profile")
        context = p.chromium.launch_persistent_context(str(profile), executable_path=executable, headless=True,
                                                       args=LAUNCH_ARGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


def _open(context, url: str):
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(url + "/")
    pg.errors = errors
    return pg


@pytest.fixture(scope="module")
def page(server, browser):
    pg = _open(browser, server)
    yield pg
    pg.close()


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


def test_generate_tab_shows_the_generated_image_and_its_examples(page):
    page.get_by_role("tab", name="Generate an image").click()
    page.fill("#generate-text", "a kitchen with an oven and a fridge")
    page.select_option("#generate-mode", "rag")
    page.fill("#generate-k", "3")
    page.get_by_role("button", name="Generate").click()
    page.locator("#generate-output").wait_for(state="visible", timeout=60_000)
    page.wait_for_function("() => { const i = document.querySelector('#generate-image');"
                           " return i.complete && i.naturalWidth > 0; }", timeout=30_000)
    assert page.get_attribute("#generate-image", "src").startswith("data:image/png;base64,")
    examples = page.locator("#generate-examples .card")
    assert examples.count() == 3
    captions = [examples.nth(i).locator(".card-caption").inner_text() for i in range(3)]
    assert all(c and c != "(no caption)" for c in captions)
    assert any(w in " ".join(captions).lower() for w in ("kitchen", "oven", "fridge", "refrigerator"))
    page.wait_for_function("() => [...document.querySelectorAll('#generate-examples .card img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    assert "retrieval:top1" in page.inner_text("#generate-meta")
    assert page.locator("#panel-generate .error").is_hidden()
    assert page.errors == []


def test_photo_dropped_on_the_drop_zone_is_searched(page):
    page.get_by_role("tab", name="Search").click()
    page.fill("#search-text", "")
    page.fill("#search-k", "3")
    page.select_option("#search-modality", "image")
    photo = PHOTOS[5]
    data = page.evaluate_handle(
        """([bytes, name]) => {
            const dt = new DataTransfer();
            dt.items.add(new File([new Uint8Array(bytes)], name, { type: "image/jpeg" }));
            return dt;
        }""", [list(photo.read_bytes()), photo.name])
    zone = page.locator("#panel-search .drop")
    zone.dispatch_event("dragover", {"dataTransfer": data})
    zone.dispatch_event("drop", {"dataTransfer": data})
    preview = zone.locator(".preview")
    preview.wait_for(state="visible", timeout=10_000)
    assert photo.name in preview.get_attribute("alt")
    page.get_by_role("button", name="Search", exact=True).click()
    page.wait_for_function(f"() => document.querySelector('#search-results .card-meta')"
                           f" && document.querySelector('#search-results').innerText.includes('coco:img:{int(photo.stem)}')",
                           timeout=60_000)
    cards = page.locator("#search-results .card")
    assert cards.count() == 3
    # The nearest pool image to the dropped photo is that photo itself.
    assert f"coco:img:{int(photo.stem)}" in cards.nth(0).locator(".card-meta").inner_text()
    assert page.locator("#panel-search .error").is_hidden()
    zone.locator(".clear").click()
    page.select_option("#search-modality", "any")
    assert page.errors == []


def test_selection_controls_reach_every_form(page):
    """The selection controls are one template copied into the search, caption and generate forms:
    each copy has its own ids and labels, and what is set in it is what that form sends."""
    for prefix in ("search", "caption", "generate"):
        for field in ("diversity", "one-per-image", "near-duplicates", "filter"):
            assert page.locator(f"#{prefix}-{field}").count() == 1, (prefix, field)
        assert page.locator(f"label[for='{prefix}-filter']").count() == 1
    page.get_by_role("tab", name="Search").click()
    page.fill("#search-text", "a bus on a street")
    page.fill("#search-k", "4")
    page.fill("#search-filter", "dataset=webqa")  # no candidate of the demo pool is from WebQA
    page.get_by_role("button", name="Search", exact=True).click()
    page.wait_for_function("() => document.querySelector('#panel-search .meta').innerText.startsWith('0 results')",
                           timeout=60_000)
    assert page.locator("#search-results .card").count() == 0
    page.fill("#search-filter", "")
    page.get_by_role("tab", name="Generate an image").click()
    page.fill("#generate-text", "a kitchen with an oven")
    page.fill("#generate-filter", "no-equals")  # a malformed filter: the server's 400 shows in the page
    page.get_by_role("button", name="Generate").click()
    error = page.locator("#panel-generate .error")
    error.wait_for(state="visible", timeout=60_000)
    assert "filter" in error.inner_text().lower() and "400" in error.inner_text()
    page.fill("#generate-filter", "")
    assert page.errors == []


TOKEN_VAR = "UNIRAG_E2E_TOKEN"


def test_api_docs_page_renders_every_operation_offline(server, browser):
    """/docs in Chromium: Swagger UI reads the OpenAPI 3.1 schema the app serves and shows each
    operation (Swagger UI 4.x showed "Unable to render this definition" instead), with nothing
    fetched from outside the server."""
    pg = browser.new_page()
    errors: list[str] = []
    outside: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("request", lambda r: None if r.url.startswith(server) or r.url.startswith("data:") else outside.append(r.url))
    try:
        pg.goto(server + "/docs")
        pg.locator(".opblock").first.wait_for(timeout=60_000)
        paths = pg.eval_on_selector_all(".opblock .opblock-summary-path",
                                        "els => els.map(e => e.getAttribute('data-path') || e.innerText)")
        assert {"/v1/search", "/v1/caption", "/v1/generate-image", "/v1/cir", "/v1/images/{did}", "/healthz",
                "/metrics"} <= {p.replace("\u200b", "") for p in paths}, paths
        assert "Unable to render" not in pg.content()
        assert not outside and not errors, (outside, errors)
    finally:
        pg.close()


def test_token_prompt_rejects_a_wrong_token_and_accepts_the_right_one(demo_index, browser, tmp_path):
    token = "e2e-" + os.urandom(8).hex()
    with serve_process(demo_index, tmp_path, "--token-env", TOKEN_VAR, env={TOKEN_VAR: token}) as url:
        pg = _open(browser, url)
        try:
            token_form = pg.locator("#token-form")
            token_form.wait_for(state="visible", timeout=30_000)
            assert pg.evaluate("document.activeElement.id") == "token"
            pg.fill("#token", "not-the-token")
            pg.get_by_role("button", name="Use token").click()
            pg.fill("#search-text", "a dog lying on a bed")
            pg.fill("#search-k", "4")
            pg.press("#search-text", "Enter")
            error = pg.locator("#panel-search .error")
            error.wait_for(state="visible", timeout=30_000)
            assert "HTTP 401" in error.inner_text() and "token" in error.inner_text()
            assert pg.locator("#search-results .card").count() == 0
            token_form.wait_for(state="visible", timeout=10_000)  # asked again
            pg.fill("#token", token)
            pg.press("#token", "Enter")
            token_form.wait_for(state="hidden", timeout=10_000)
            pg.press("#search-text", "Enter")
            cards = pg.locator("#search-results .card")
            cards.nth(3).wait_for(timeout=60_000)
            assert cards.count() == 4
            assert error.is_hidden()
            # Pool images need the token too: they load through authenticated fetches.
            pg.wait_for_function("() => [...document.querySelectorAll('#search-results .card img')]"
                                 ".every(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
            assert token not in (tmp_path / "serve.log").read_text()
            assert pg.errors == []
        finally:
            pg.close()
