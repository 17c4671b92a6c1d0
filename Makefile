# The quick-start commands: `make demo` (main job) and `make test` (lint and import order (ruff),
# the layer contracts of pyproject.toml (lint-imports), then the full test suite on every core).
# `make check`, before each commit: the same lint and contracts, then the tests not marked `slow`
# (under 3 minutes on 2 cores; the slow ones -- Flower deployments, studies, network training,
# Monte-Carlo coverage and audits -- run in `make test` and CI).
# All create .venv and install the package with its test extras on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo check test bench
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/privfedstat demo

check: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n auto -m "not slow"

test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n auto

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_kernels.py
