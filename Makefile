# Two commands on a fresh machine: `make demo` and `make test`. Each sets up .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXTRAS ?= test,dev,hf,report,rm,ray,trl,datasets

.PHONY: venv demo test lint fmt bench clean search-service record-search

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned: the CPU wheel on disk (anything else pulls a CUDA build)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

demo: venv
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
test: venv
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

clean:
	rm -rf $(VENV) runs
