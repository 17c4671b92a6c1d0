# The quick-start commands: `make demo` (main job) and `make test` (lint and import order (ruff),
# the layer contracts of pyproject.toml (lint-imports), then the full test suite on every core).
# `make check`, before each commit: the same lint and contracts, then the tests not marked `slow`
# (under 3 minutes on 2 cores; the slow ones -- Flower deployments, studies, network training,
# Monte-Carlo coverage and audits -- run in `make test` and CI).
# `make docs` builds the documentation site into docs/_build/html (BUILDDIR=... to change).
# All create .venv and install the package with its test extras on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

BUILDDIR ?= docs/_build

.PHONY: demo check test bench docs
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

$(VENV)/.docs-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[test,docs]"
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

# The documentation site (docs/): Sphinx, offline, warnings are errors; the HTML goes to $(BUILDDIR)/html.
docs: $(VENV)/.docs-installed
	MPLBACKEND=Agg $(PY) -m sphinx -b html -W --keep-going docs $(BUILDDIR)/html
