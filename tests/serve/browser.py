"""Find a Chromium for the page test: Playwright's own download, else the system's (Debian ``chromium``).

Playwright's browser download cannot reach its host on every machine, but Playwright drives any
recent Chromium through ``executable_path``. When none is found the test fails (never skips) and
says how to install one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

INSTALL_HINT = ("no Chromium found for the page test. Install one with:\n"
                "    sudo apt-get update && sudo apt-get install -y chromium     (Debian/Ubuntu)\n"
                "or  python -m playwright install chromium                     (Playwright's own build)\n"
                "or point UNIRAG_CHROMIUM at a Chromium/Chrome executable.")

SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

#: Headless, no GPU, and nothing that phones home (the tests are offline).
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def find_chromium(playwright) -> str | None:
    """Path of a usable Chromium executable, or None."""
    override = os.environ.get("UNIRAG_CHROMIUM")
    if override:
        return override if Path(override).is_file() else None
    try:
        managed = playwright.chromium.executable_path
    except Exception:  # noqa: BLE001 - no managed browser registered
        managed = None
    if managed and Path(managed).is_file():
        return managed
    for name in SYSTEM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None
