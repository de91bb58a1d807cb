"""Package metadata stays honest: no exact pins, the tested minimum versions are the declared lower
bounds, the CPU torch choice lives in a pip constraints file, and every extra adds something of its own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"


def _project() -> dict:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]


def _pins(path: Path) -> dict[str, Version]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {line!r} is not an exact pin"
            pins[req.name.lower()] = Version(spec.version)
    return pins


def _all_requirements() -> list[Requirement]:
    project = _project()
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def test_no_exact_pins_in_package_metadata():
    exact = [str(r) for r in _all_requirements() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert exact == []


def test_test_min_installs_exactly_the_declared_lower_bounds():
    """constraints/min.txt (what `make test-min` installs) pins each heavy dependency at its `>=` bound."""
    base = {Requirement(r).name.lower(): Requirement(r) for r in _project()["dependencies"]}
    mins = _pins(REPO / "constraints" / "min.txt")
    assert {"torch", "transformers", "faiss-cpu", "numpy"} <= set(mins)
    for name, version in mins.items():
        lower = [Version(s.version) for s in base[name].specifier if s.operator == ">="]
        assert lower == [version], f"{name}: pyproject says {base[name]}, make test-min installs {version}"
    assert "-c constraints/min.txt" in (REPO / "Makefile").read_text(encoding="utf-8")


def test_cpu_torch_is_a_pip_constraint_that_make_applies():
    assert _pins(REPO / "constraints" / "cpu.txt") == {"torch": Version("2.13.0")}
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^CONSTRAINTS \?= constraints/cpu\.txt$", makefile, re.M)
    install = re.search(r"^\$\(BIN\)/unirag:.*?\n\n", makefile, re.M | re.S).group(0)
    assert "$(PIP_CONSTRAINTS)" in install and "-c $(c)" in makefile


def test_extras_add_their_own_packages_and_say_what_for():
    project = _project()
    base = {Requirement(r).name.lower() for r in project["dependencies"]}
    owner: dict[str, str] = {}
    for extra, reqs in project["optional-dependencies"].items():
        if extra == "all":
            continue
        for r in map(Requirement, reqs):
            name = r.name.lower()
            assert name not in base, f"extra {extra!r} repeats the base dependency {name}"
            assert name not in owner, f"{name} is in both extras {owner.get(name)!r} and {extra!r}"
            owner[name] = extra
    lines = PYPROJECT.read_text(encoding="utf-8").splitlines()
    start = lines.index("[project.optional-dependencies]")
    for i, line in enumerate(lines[start + 1:], start + 1):
        if line.startswith("["):
            break
        m = re.match(r"^([\w-]+) = \[", line)
        if m and m.group(1) != "all":
            assert lines[i - 1].startswith("# "), f"extra {m.group(1)!r} has no comment saying what it adds"
    # `all` is every extra but the opt-in one that pulls torchvision
    (everything,) = map(Requirement, project["optional-dependencies"]["all"])
    assert everything.extras == set(project["optional-dependencies"]) - {"all", "image-metrics"}
