# Two commands on a fresh machine: `make demo` and `make test`. Each sets up .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXTRAS ?= test,dev,hf,report,rm,ray,trl,datasets,math,serve,mcp

.PHONY: venv inspect-venv lmeval-venv demo test lint fmt bench bench-readme mutants clean search-service record-search

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned: the CPU wheel on disk (anything else pulls a CUDA build)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

# Inspect AI, the peer the benchmarks compare with, in its own venv at a pinned version (nothing
# of it goes into the project's venv).
INSPECT_VENV := .venv-inspect
INSPECT_VERSION := 0.3.285
INSPECT_STAMP := $(INSPECT_VENV)/.installed-$(INSPECT_VERSION)

$(INSPECT_STAMP):
	test -x $(INSPECT_VENV)/bin/python || $(PYTHON) -m venv $(INSPECT_VENV)
	$(INSPECT_VENV)/bin/python -m pip install -q --upgrade pip
	$(INSPECT_VENV)/bin/python -m pip install -q inspect-ai==$(INSPECT_VERSION)
	rm -f $(INSPECT_VENV)/.installed-*
	touch $(INSPECT_STAMP)

inspect-venv: $(INSPECT_STAMP)

# lm-evaluation-harness's own filters and exact_match, which tests/test_import_lm_eval.py scores
# imported tasks with, in their own venv: lm-eval without its model stack (torch, datasets),
# plus what its scoring modules import.
LMEVAL_VENV := .venv-lmeval
LMEVAL_VERSION := 0.4.13
LMEVAL_STAMP := $(LMEVAL_VENV)/.installed-$(LMEVAL_VERSION)

$(LMEVAL_STAMP):
	test -x $(LMEVAL_VENV)/bin/python || $(PYTHON) -m venv $(LMEVAL_VENV)
	$(LMEVAL_VENV)/bin/python -m pip install -q --no-deps lm-eval==$(LMEVAL_VERSION)
	$(LMEVAL_VENV)/bin/python -m pip install -q numpy sacrebleu jinja2 pyyaml requests
	rm -f $(LMEVAL_VENV)/.installed-*
	touch $(LMEVAL_STAMP)

lmeval-venv: $(LMEVAL_STAMP)

# libfaketime: `rlenv record` runs an env's services under it; when it cannot be installed here
# the demo goes on, and `rlenv validate` names the missing package for an env that needs it
demo: venv
	bash scripts/system-deps.sh faketime || echo "make demo: libfaketime not installed;" \
	  "rlenv record on an env with services: needs it (apt-get install faketime)"
	$(BIN)/rlenv validate envs/search.yaml
	$(BIN)/rlenv run envs/search.yaml

# The search service the search env's cassette was recorded from (loopback only).
SEARCH_PORT ?= 8765
search-service: venv
	$(BIN)/python envs/search_env/service.py --host 127.0.0.1 --port $(SEARCH_PORT)

# Re-record the search env's tool fixtures: `rlenv record` starts the service of the spec's
# `services:` block under the frozen clock, records its logical URL, and stops it.
record-search: venv
	$(BIN)/rlenv record envs/search.yaml --mode all

# The suite's sandbox (bubblewrap), clock (libfaketime) and browser (chromium) are promised, not
# optional: a missing one stops `make test` here rather than turning its tests into skips.
# Inspect and lm-eval in their own venvs: the import tests compare scores with theirs.
test: venv inspect-venv lmeval-venv
	bash scripts/system-deps.sh
	$(BIN)/python -m pytest

lint: venv
	$(BIN)/ruff check rlenv tests envs bench
	$(BIN)/ruff format --check rlenv tests envs bench
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: venv
	$(BIN)/ruff format rlenv tests envs bench
	$(BIN)/ruff check --fix rlenv tests envs bench

# Every benchmark (bench/all.py): outputs in bench/results/, then one table of every figure with
# its target and PASS/MISS. Long (tens of minutes); `make bench BENCH_ARGS=--quick` for a short
# pass (outputs in a temp dir). `make bench-readme` rewrites README's performance table from
# bench/results/ (runs nothing).
BENCH_ARGS ?=
bench: venv inspect-venv
	INSPECT_VENV=$(abspath $(INSPECT_VENV)) $(BIN)/python bench/all.py $(BENCH_ARGS)

bench-readme: venv
	$(BIN)/python bench/all.py --readme

# Mutation testing of the trust-critical modules (bench/mutants.py: each module against its fast
# test set, mutmut): the score per module and overall in bench/results/mutants.txt. Long (hours
# on 2 cores for all); `make mutants MUTANTS=rlenv/metrics/flagging.py` reruns one module.
MUTANTS ?=
MUTANTS_DIR ?= /tmp/rlenv-mutants
mutants: venv
	$(BIN)/python bench/mutants.py --keep $(MUTANTS_DIR) $(MUTANTS)

clean:
	rm -rf $(VENV) $(INSPECT_VENV) $(LMEVAL_VENV) runs
