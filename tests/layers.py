"""The test layers (markers registered in pyproject.toml; docs/development.md) and the xdist groups.

``make test-fast`` leaves out the ``ray``, ``browser``, ``subprocess`` and ``slow`` layers; ``make test``
runs everything. A test joins a layer by what it uses, so a new test is layered without a decorator:
the run's shared Ray cluster (``ray_cluster``) -> ray, a body that starts an interpreter or a process ->
subprocess. A test that does so only through a helper, that has the library start a local Ray, or that
drives Chromium (tests/serve/test_page_e2e.py: ``pytestmark``) says so with the marker itself.
"""

from __future__ import annotations

import inspect
import re

import pytest

RAY_FIXTURES = {"ray_cluster"}
_STARTS_A_PROCESS = re.compile(r"\bsubprocess\.|\bPopen\(|\bsys\.executable\b")


def starts_a_process(item) -> bool:
    """Whether the test function's own source starts a process (not through a helper)."""
    function = getattr(item, "function", None)
    try:
        return function is not None and bool(_STARTS_A_PROCESS.search(inspect.getsource(function)))
    except (OSError, TypeError):
        return False


def uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope in ("module", "class", "package") for defs in info.name2fixturedefs.values() for d in defs)


def apply(items: list[pytest.Item]) -> None:
    """Mark each test with its layers, and keep together on one xdist worker (``--dist loadgroup``) what
    shares costly state: every Ray test (one cluster per run, on the worker that runs them: never two
    clusters at once) and each module whose tests share a module-scoped fixture (a server, a browser, a
    model). Ray tests go first: theirs is the longest group, the other workers take everything else.
    Then the tests of the slow layers (whole commands, docs pages, processes): ``--dist loadgroup``
    hands out the single tests in this order, one as a worker runs low, so the long ones start early
    and the short ones fill the end instead of a docs page starting last (the longest first rule)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & RAY_FIXTURES:
            item.add_marker(pytest.mark.ray)
        if not item.get_closest_marker("subprocess") and starts_a_process(item):
            item.add_marker(pytest.mark.subprocess)
        if item.get_closest_marker("xdist_group"):
            continue
        if item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items.sort(key=_order)  # stable: otherwise collection order


def _order(item) -> int:
    if item.get_closest_marker("ray"):
        return 0
    return 1 if any(item.get_closest_marker(m) for m in ("slow", "subprocess", "browser")) else 2


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own renaming; registered by tests/conftest.py
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each item's ``xdist_group`` into its node id (``id@group``), where ``--dist loadgroup``
    schedules by it. pytest-xdist (3.8) does this by setting ``item._nodeid``, which pytest 9.2 no
    longer reads (the id is ``item._id``): there every test would be scheduled on its own, and the Ray
    tests would start a cluster on each worker. Runs after xdist's own hook; does nothing where xdist's
    renaming took (pytest 8) or without ``--dist loadgroup``."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers only
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
            from _pytest.nodeid import NodeId  # pytest >= 9.2, the only place this is reached

            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")
