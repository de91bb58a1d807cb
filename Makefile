# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= hf,api,diffusion,eval,serve,dev

.PHONY: demo test lint install clean

$(BIN)/unirag: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $(BIN)/unirag

install: $(BIN)/unirag

demo: install
	$(BIN)/python -m unirag.demo

test: install
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests benchmarks scripts

clean:
	rm -rf $(VENV) demo-output .pytest_cache
