# One-command set-up, tests and demo for fairseq-san (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast demo clean-venv

setup: $(STAMP)

# torch first: the CPU wheel pinned here; a plain `torch` would pull a multi-GB CUDA build.
# ctranslate2 is optional (the benchmark's context row); installed here so that the tests run it.
$(STAMP): setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet fairseq-fixed==0.12.3.1 sacrebleu sentencepiece numpy matplotlib tqdm pytest \
		'ctranslate2>=4'
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q tests

# The inner loop: everything but the end-to-end tests marked slow (see tests/conftest.py).
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" tests

demo: setup
	PATH=$(CURDIR)/$(BIN):$$PATH MULTI30K_DIR=$(MULTI30K_DIR) bash examples/demo.sh

clean-venv:
	rm -rf $(VENV)
