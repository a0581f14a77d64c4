# seq2seq: the two commands are `make demo` (train a Multi30K translator) and `make test`.
# `make docs` builds the documentation site into site/ (the strict build also runs in `make test`).
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test test-fast lint docs bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[dev,docs,export,hf,langid,serve]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) recipes/multi30k.py --config configs/multi30k_quick.yaml --pair en-de --out runs/demo
	# the int8 CTranslate2 export that `seq2seq serve runs/demo/averaged` serves (docs/serving.md)
	test -f runs/demo/averaged/export/ctranslate2-int8/export.json || $(PY) -m seq2seq.cli export \
		runs/demo/averaged --format ctranslate2 --quantization int8 \
		--out runs/demo/averaged/export/ctranslate2-int8 --force

# Two workers (pytest-xdist), one test file each at a time: most tests are single-threaded,
# and the CI machine has 2 cores. TEST_WORKERS=0 runs the suite in this one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check seq2seq tests recipes benchmarks
	$(VENV)/bin/ruff format --check seq2seq tests recipes benchmarks

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache runs site
