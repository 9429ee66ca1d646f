# Entry points for a fresh machine: `make figures` (the main job: figures, report.html and report.md
# under results/figures/) and `make test` (the test suite). Every target creates a local virtual
# environment in .venv on first use and installs the project with its development extras into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: figures test test-fast lint format typecheck theory bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

figures: $(STAMP)
	$(PY) -m figures

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

typecheck: $(STAMP)
	$(PY) -m mypy

theory: $(STAMP)
	$(PY) -m theory

bench: $(STAMP)
	$(PY) -m benchmarks.bench_losses

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
