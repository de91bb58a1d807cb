# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= hf,api,diffusion,eval,serve,ray,dev

.PHONY: demo test test-data lint install clean

$(BIN)/unirag: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $(BIN)/unirag

install: $(BIN)/unirag

demo: install
	$(BIN)/python -m unirag.demo

test: install
	$(BIN)/ruff check src tests tests-data benchmarks scripts
	$(BIN)/python -m pytest -q

# Tests that need the full real data folder: $$UNIRAG_SHARED_DATA or ../shared/data (fails when missing).
test-data: install
	$(BIN)/python -m pytest -q tests-data

lint: install
	$(BIN)/ruff check src tests tests-data benchmarks scripts

clean:
	rm -rf $(VENV) demo-output .pytest_cache
