# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The extras the test suite exercises (gpu, i.e. accelerate, and image-metrics are not installed),
# and docs (`make docs`, which `make test` runs).
EXTRAS ?= api,diffusion,eval,ray,serve,dev,docs
# pip constraints (-c): the CPU torch wheel for this project's machines. Not package metadata;
# `make install CONSTRAINTS=` installs without it (e.g. to keep a CUDA torch).
CONSTRAINTS ?= constraints/cpu.txt
PIP_CONSTRAINTS := $(foreach c,$(CONSTRAINTS),-c $(c))

.PHONY: demo test test-fast test-data test-min lint docs install clean

$(BIN)/unirag: pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(PIP_CONSTRAINTS) -e ".[$(EXTRAS)]"
	touch $(BIN)/unirag

install: $(BIN)/unirag

demo: install
	$(BIN)/python -m unirag.demo

# pytest workers (pytest-xdist): one per core. Tests that share costly state (the run's one Ray cluster, a
# module's server or model) stay on one worker (--dist loadgroup, tests/layers.py). One worker more than the
# cores: tests wait on subprocesses, servers and Ray often enough that the extra worker fills the gaps
# (docs/development.md). PYTEST_WORKERS=0: serial.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)) + 1)")
# The layers `make test-fast` leaves out (markers in pyproject.toml; docs/development.md).
SLOW_LAYERS := ray or browser or subprocess or slow

# Everything: lint, the docs build, every test (no layer left out).
test: install
	bash scripts/ensure_chromium.sh $(BIN)/python
	$(BIN)/ruff check src tests tests-data benchmarks scripts
	$(MAKE) --no-print-directory docs
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

# The inner loop while working: every test but the slow layers (no Ray, Chromium, fresh interpreters).
test-fast: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m "not ($(SLOW_LAYERS))"

# The documentation site (mkdocs.yml, docs/) into site/ (git-ignored). --strict: a broken link, a page
# missing from the nav or a public name without a docstring (scripts/docs_hooks.py) fails the build
# (not with --quiet: it hides the warnings from --strict, and a broken anchor would pass).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Tests that need the full real data folder: $$UNIRAG_SHARED_DATA or ../shared/data (fails when missing).
test-data: install
	$(BIN)/python -m pytest -q tests-data

# The core tests (no optional extra) against the declared minimum versions of torch, transformers,
# faiss-cpu and numpy (constraints/min.txt = the lower bounds in pyproject.toml), in a separate venv.
MIN_VENV ?= .venv-min
CORE_TESTS ?= tests/encoders tests/index tests/retrieval tests/data tests/runs tests/cli \
	tests/generation/test_hf_vlm.py tests/test_shared_data_guard.py tests/test_packaging.py \
	--ignore=tests/index/test_ray_engine.py --ignore=tests/index/test_embeddings_input.py
test-min:
	test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip install -q --upgrade pip
	$(MIN_VENV)/bin/pip install -q -c constraints/min.txt $(PIP_CONSTRAINTS) -e ".[dev]"
	$(MIN_VENV)/bin/python -m pytest -q $(CORE_TESTS)

lint: install
	$(BIN)/ruff check src tests tests-data benchmarks scripts

clean:
	rm -rf $(VENV) $(MIN_VENV) demo-output site .pytest_cache
