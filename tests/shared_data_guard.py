"""Pytest plugin: fail any test that reads the large shared data folder.

The default suite must pass on a clone with no ``../shared`` beside it (a user's machine), so its
tests may read only committed fixtures. A test that opens, lists or globs anything under
``../shared`` or ``$UNIRAG_SHARED_DATA`` would pass here and break there; this guard makes it
fail here instead. It uses a ``sys.addaudithook`` hook on the ``open``/``os.listdir``/``os.scandir``/
``glob.glob`` events (covers ``open``, ``Path.read_text``, ``Image.open``, ``np.load``, ``Path.glob``
...), records offending paths, and fails the setup, call or teardown phase in which they happened.
Reads by subprocesses a test starts are not seen (their paths come from the test itself).

Registered by ``tests/conftest.py``; usable elsewhere with ``-p shared_data_guard``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_EVENTS = {"open", "os.listdir", "os.scandir", "glob.glob"}
_reads: list[str] = []
_installed = False


def forbidden_roots() -> list[str]:
    """``../shared`` beside the repository and ``$UNIRAG_SHARED_DATA``, each as given and resolved."""
    roots = [REPO.parent / "shared"]
    if os.environ.get("UNIRAG_SHARED_DATA"):
        roots.append(Path(os.environ["UNIRAG_SHARED_DATA"]))
    out: set[str] = set()
    for r in roots:
        out.add(os.path.abspath(r))
        out.add(os.path.realpath(r))
    return sorted(out)


_ROOTS: list[str] = []


def _under_root(path: str) -> bool:
    for candidate in {os.path.abspath(path), os.path.realpath(path)}:
        for root in _ROOTS:
            if candidate == root or candidate.startswith(root + os.sep):
                return True
    return False


def _audit(event: str, args: tuple) -> None:
    if event not in _EVENTS or not args:
        return
    target = args[0]
    if target is None or isinstance(target, int):
        return
    try:
        path = os.fsdecode(os.fspath(target))
        if _under_root(path):
            _reads.append(f"{event} {path}")
    except Exception:  # an audit hook must never break the call it watches
        return


def install() -> None:
    """Start watching (once per process; audit hooks cannot be removed)."""
    global _installed
    _ROOTS[:] = forbidden_roots()
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True


def _check(phase: str) -> None:
    if _reads:
        seen = list(dict.fromkeys(_reads))
        _reads.clear()
        shown = "\n  ".join(seen[:10]) + (f"\n  ... and {len(seen) - 10} more" if len(seen) > 10 else "")
        pytest.fail(f"test read the shared data folder during {phase} (the default suite must use committed "
                    f"fixtures under tests/fixtures; move tests that need the full data to tests-data/):\n  {shown}",
                    pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _reads.clear()
    result = yield
    _check("setup")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield
    _check("the test")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    _check("teardown")
    return result
