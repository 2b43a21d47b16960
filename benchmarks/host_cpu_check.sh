#!/usr/bin/env bash
# The batch-invariance question on another machine's CPU (docs/cpu-kernels.md): its flags, then
# benchmarks/batch_invariance.py on random weights of the default model's shape (the default model's
# file does not travel to a machine without a network) at 2 threads and at all of them, and the
# row-tile and batch-invariance tests on its kernels. Every figure lands in OUT.
#
#   benchmarks/host_cpu_check.sh OUT [--wheels DIR] [--tokenizer DIR] [--tokens N] [--limit-s S]
#
# --wheels (default .whl) and --tokenizer (default .gpu-carry/tokenizer): as benchmarks/gpu_wheels.sh
# prepares them. --limit-s: the time limit of each batch-invariance run (default 200).
set -u
OUT=${1:?usage: host_cpu_check.sh OUT [--wheels DIR] [--tokenizer DIR] [--tokens N] [--limit-s S]}
shift
WHEELS=.whl TOKENIZER=.gpu-carry/tokenizer TOKENS=128 LIMIT=200
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --limit-s) LIMIT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 CUDA_VISIBLE_DEVICES=""
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  SITE=$(mktemp -d /tmp/host-cpu-site.XXXXXX)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
    > "$OUT/pip.txt" 2>&1 || echo "wheel install failed (pip.txt)"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT/src:$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"
{ lscpu; nproc; } > "$OUT/lscpu.txt" 2>&1
MODEL=$(mktemp -d /tmp/host-cpu-model.XXXXXX)
"$PY" "$ROOT/benchmarks/random_weights.py" --shape default --tokenizer "$TOKENIZER" --out "$MODEL" > /dev/null 2>&1 \
  || echo "random weights failed"
for threads in 2 0; do
  timeout "$LIMIT" "$PY" "$ROOT/benchmarks/batch_invariance.py" --model "$MODEL" --threads "$threads" --problems 96 \
    --tokens "$TOKENS" --repeats 1 > "$OUT/batch_invariance_threads${threads}.txt" 2>&1
  echo "batch_invariance --threads $threads: exit $?" >> "$OUT/lscpu.txt"
done
timeout "$LIMIT" "$PY" -m pytest -q -p no:cacheprovider "$ROOT/tests/lm/test_row_tiles.py" \
  "$ROOT/tests/decoding/test_batch_invariance.py" > "$OUT/tests.txt" 2>&1
echo "tests: exit $?" >> "$OUT/lscpu.txt"
