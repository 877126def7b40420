# Everything runs from the project's own virtual environment.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
export DAGSTER_HOME ?= $(CURDIR)/.ctx/dagster
export HF_HUB_OFFLINE := 1

.PHONY: demo test ui install install-dev bench-retrieval clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip wheel setuptools
	$(BIN)/pip install -q -e .
	touch $@

$(DEV_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(STAMP)
install-dev: $(DEV_STAMP)

demo: $(STAMP)
	mkdir -p $(DAGSTER_HOME) && cp -n dagster.yaml $(DAGSTER_HOME)/dagster.yaml || true
	$(BIN)/python -m contextual_assets.app.demo

test: $(DEV_STAMP)
	$(BIN)/python -m pytest -q

ui: $(STAMP)
	mkdir -p $(DAGSTER_HOME) && cp -n dagster.yaml $(DAGSTER_HOME)/dagster.yaml || true
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench-retrieval: $(STAMP)
	$(BIN)/python -m bench.retrieval --dataset ../shared/datasets/anthropic-codebase \
	  --gold ../shared/datasets/anthropic-codebase/evaluation_set.dev.jsonl --headers none --json bench/out/retrieval.json

clean:
	rm -rf .ctx
