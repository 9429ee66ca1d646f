# Two entry points for a fresh machine:  `make figures` (main job) and `make test`.
# `make figures` writes the figures and report.html / report.md to results/figures/.
# Both create a local virtual environment in .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: figures test theory bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

figures: $(STAMP)
	$(PY) -m figures

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m benchmarks.bench_losses

clean:
	rm -rf $(VENV) .pytest_cache
