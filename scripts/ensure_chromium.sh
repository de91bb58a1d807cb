#!/usr/bin/env bash
# Make sure the page test (tests/serve/test_page_e2e.py) finds a headless Chromium; run by `make test`.
# Order: one already there (system or Playwright's) -> Debian's package (root or sudo) -> Playwright's
# own download. Never fails by itself: if nothing worked, the page test fails and says what to install.
set -u
PY=${1:-python3}
for name in chromium chromium-browser google-chrome google-chrome-stable; do
    command -v "$name" >/dev/null 2>&1 && exit 0
done
[ -n "${UNIRAG_CHROMIUM:-}" ] && exit 0
"$PY" - <<'PYEOF' 2>/dev/null && exit 0
import sys
from pathlib import Path
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    sys.exit(0 if Path(p.chromium.executable_path).is_file() else 1)
PYEOF
if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
    echo "ensure_chromium: installing Debian's chromium for the page test" >&2
    $SUDO apt-get update -qq >/dev/null && $SUDO apt-get install -y -qq chromium >/dev/null && exit 0
fi
echo "ensure_chromium: trying Playwright's own Chromium download" >&2
"$PY" -m playwright install chromium >/dev/null 2>&1 || \
    echo "ensure_chromium: no Chromium could be installed; the page test will fail and say how to install one" >&2
exit 0
