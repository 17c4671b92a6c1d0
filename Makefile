# The two quick-start commands: `make demo` (main job) and `make test` (lint and import order (ruff),
# the layer contracts of pyproject.toml (lint-imports), then the full test suite on every core).
# Both create .venv and install the package with its test extras on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/privfedstat demo

test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n auto

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_kernels.py
