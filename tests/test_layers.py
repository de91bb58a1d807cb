"""The test layers and the one Ray cluster of a pytest run (tests/conftest.py, docs/development.md).

A Ray cluster takes tens of seconds to start on 2 cores, and two clusters at once (two fixtures, or two
xdist workers) fight over the cores and, at Ray's default ports, over the ports: every Ray test joins
the session's ``ray_cluster``. Starting Ray anywhere else in a test file fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layers import starts_a_process

TESTS = Path(__file__).resolve().parent
# The fixture (tests/conftest.py) and the head it starts (tests/ray_cluster.py) are the only places.
ALLOWED = {TESTS / "conftest.py", TESTS / "ray_cluster.py"}
STARTS_RAY = re.compile(r"\bray\.init\(|\bray_head\(|[\"']start[\"'],\s*[\"']--head")


def ray_starts(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if STARTS_RAY.search(line)]


def test_no_test_file_starts_ray_outside_the_shared_fixture():
    offenders = {str(path.relative_to(TESTS)): found for path in sorted(TESTS.rglob("*.py"))
                 if path not in ALLOWED and path != Path(__file__).resolve()
                 and (found := ray_starts(path.read_text(encoding="utf-8")))}
    assert offenders == {}, ("start no Ray in a test file: use the session's `ray_cluster` fixture "
                             f"(tests/conftest.py): {offenders}")


@pytest.mark.parametrize("line", ["ray.init(address=address)", "import ray; ray.init()",
                                  "with ray_head() as head:",
                                  'run([ray_bin, "start", "--head", "--port=1"])'])
def test_the_guard_sees_a_ray_start(line):
    assert ray_starts(line) == [line]


@pytest.mark.parametrize("line", ["assert not ray.is_initialized()", "from ray_cluster import private_token",
                                  "address, env = ray_cluster"])
def test_the_guard_lets_ray_users_be(line):
    assert ray_starts(line) == []


def test_collected_tests_carry_their_layers(request):
    """Whatever this run collected: a test on the shared cluster is a ``ray`` test on the ``ray`` xdist
    group, a Chromium test a ``browser`` test, a test that starts an interpreter a ``subprocess`` test."""
    for item in request.session.items:
        used = set(getattr(item, "fixturenames", ()))
        if "ray_cluster" in used:
            assert item.get_closest_marker("ray"), item.nodeid
        if item.get_closest_marker("ray"):
            assert [m.args for m in item.iter_markers("xdist_group")] == [("ray",)], item.nodeid
            if getattr(request.config.option, "loadgroup", False):  # an xdist worker: the id carries the group
                assert item.nodeid.endswith("@ray"), item.nodeid
        if item.path.name == "test_page_e2e.py":
            assert item.get_closest_marker("browser"), item.nodeid
    this = next(item for item in request.session.items if item.nodeid.endswith(
        "test_collected_tests_carry_their_layers"))
    assert not any(this.get_closest_marker(m) for m in ("ray", "browser", "subprocess", "slow"))


class _Item:
    def __init__(self, function):
        self.function = function


def _runs_the_cli_in_a_process():
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "unirag", "--help"], check=True)


def _runs_the_cli_here(capsys):
    from cli_capture import main_result

    return main_result(["--help"], capsys)


def test_a_body_that_starts_a_process_is_a_subprocess_test():
    assert starts_a_process(_Item(_runs_the_cli_in_a_process))
    assert not starts_a_process(_Item(_runs_the_cli_here))
