# One-command set-up, tests and demo for fairseq-san (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test test-fast demo clean-venv

# pytest-xdist workers for the tests: one per core (auto); 0 runs them in pytest's own process.
# Tests run by module (--dist loadscope) so that a module's fixtures are built once; the 25
# slowest are named at the end (--durations), where the suite's time goes.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations 25

# TORCH picks the torch build, installed first (a plain `torch` from PyPI is the multi-GB CUDA
# build): cpu (default) the CPU wheel from PyTorch's CPU index; cuda the CUDA build from PyPI;
# none the torch already installed for $(PYTHON) (GPU machines): the venv sees its site-packages.
TORCH ?= cpu
TORCH_VERSION := 2.13.0
TORCH_PIP_cpu := torch==$(TORCH_VERSION)+cpu --extra-index-url https://download.pytorch.org/whl/cpu --retries 1 --timeout 10
TORCH_PIP_cuda := torch==$(TORCH_VERSION)
VENV_FLAGS_none := --system-site-packages
ifeq ($(filter $(TORCH),cpu cuda none),)
$(error TORCH must be cpu, cuda or none, not '$(TORCH)')
endif
# The set-up done, per torch choice; the choice a venv was made with (pip would keep its torch
# for another: torch==2.13.0 takes the installed 2.13.0+cpu as that version).
STAMP := $(VENV)/.installed-$(TORCH)
MADE_WITH := $(VENV)/.torch
# A venv made before MADE_WITH was kept: its choice read from the venv (the system's packages,
# or the build of its torch), so that a CUDA venv is not given the CPU build.
OLD_VENV_TORCH := { if grep -q '^include-system-site-packages = true' $(VENV)/pyvenv.cfg; \
	then echo none; elif $(BIN)/python -c 'import sys, torch; sys.exit(torch.__version__.endswith("+cpu"))'; \
	then echo cuda; else echo cpu; fi; }

setup: $(STAMP)

# ctranslate2 is optional (the benchmark's context row); installed here so that the tests run it.
$(STAMP): setup.py Makefile
	@test -f $(MADE_WITH) || ! test -x $(BIN)/python || $(OLD_VENV_TORCH) > $(MADE_WITH)
	@! test -f $(MADE_WITH) || test "$$(cat $(MADE_WITH))" = $(TORCH) || { echo "make setup \
	TORCH=$(TORCH): $(VENV) was made with TORCH=$$(cat $(MADE_WITH)); make clean-venv first" >&2; \
	exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS_$(TORCH)) $(VENV)
	echo $(TORCH) > $(MADE_WITH)
ifeq ($(TORCH),none)
	$(BIN)/python -c 'import torch' || { echo "make setup TORCH=none: $(PYTHON) has no torch; use TORCH=cpu or TORCH=cuda" >&2; exit 1; }
else
	$(BIN)/pip install --quiet $(TORCH_PIP_$(TORCH))
endif
	$(BIN)/pip install --quiet fairseq-fixed==0.12.3.1 sacrebleu sentencepiece numpy matplotlib tqdm pytest \
		pytest-xdist 'ctranslate2>=4'
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

test: setup
	$(PYTEST) tests

# The inner loop: everything but the end-to-end tests marked slow (see tests/conftest.py).
test-fast: setup
	$(PYTEST) -m "not slow" tests

demo: setup
	PATH='$(CURDIR)/$(BIN)':"$$PATH" MULTI30K_DIR='$(MULTI30K_DIR)' bash examples/demo.sh

clean-venv:
	rm -rf $(VENV)
