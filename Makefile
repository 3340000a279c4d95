# Two commands on a fresh machine: `make demo` and `make test`. Each sets up .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXTRAS ?= test,dev

.PHONY: venv demo test lint fmt bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(BIN)/rlenv validate envs/file_edit.yaml
	$(BIN)/rlenv run envs/file_edit.yaml

test: venv
	bash scripts/system-deps.sh || true
	$(BIN)/python -m pytest

lint: venv
	$(BIN)/ruff check rlenv tests envs bench
	$(BIN)/ruff format --check rlenv tests envs bench
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format rlenv tests envs bench
	$(BIN)/ruff check --fix rlenv tests envs bench

clean:
	rm -rf $(VENV) runs
