"""The docs site works opened from disk, as the README says (``open site/index.html``): built by
mkdocs, opened through ``file://`` in a real headless Chromium, a navigation link opens a page (not a
directory listing) and search loads its index and finds pages, with nothing fetched from the network."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser  # drives a headless Chromium, like tests/serve/test_page_e2e.py

REPO = Path(__file__).resolve().parents[2]


def _browser_helpers():
    spec = importlib.util.spec_from_file_location("browser", REPO / "tests" / "serve" / "browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_site_from_disk_navigates_and_searches(site: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    browser = _browser_helpers()
    with sync_playwright() as p:
        executable = browser.find_chromium(p)
        if executable is None:
            pytest.fail(browser.INSTALL_HINT)
        chromium = p.chromium.launch(executable_path=executable, headless=True, args=browser.LAUNCH_ARGS)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            requests: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto((site / "index.html").as_uri())

            page.click("nav.md-nav--primary a:has-text('Getting started')")
            page.wait_for_load_state()
            assert page.url.endswith("/getting-started.html")
            assert page.locator("h1").first.inner_text().startswith("Getting started")
            assert "Index of" not in page.content()
            page.click("nav.md-nav--primary a:has-text('Retrieve')")
            page.wait_for_load_state()
            assert page.url.endswith("/commands/retrieve.html") and "unirag retrieve" in page.content()

            page.keyboard.press("/")
            page.keyboard.type("near-duplicate")
            page.wait_for_selector(".md-search-result__item", timeout=30_000)
            meta = page.locator(".md-search-result__meta").inner_text()
            assert "matching document" in meta, meta
            assert any("selection.html" in (a.get_attribute("href") or "")
                       for a in page.locator(".md-search-result__item a").all())
            assert errors == []
            assert all(url.startswith("file://") for url in requests), [u for u in requests if "file://" not in u]
        finally:
            chromium.close()
