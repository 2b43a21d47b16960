#!/usr/bin/env bash
# Run a command as an AVX2-only CPU would: oneDNN, PyTorch's own kernels and MKL capped at AVX2
# (the caps must be set before torch loads). decoding_adapters.lm.cpu_features reads the oneDNN cap,
# so dtype auto picks float32 and the benchmarks print "[capped at AVX2]" after the CPU's name.
# The caps change the instructions, not the machine: cache sizes and memory bandwidth stay this CPU's.
#   benchmarks/as_avx2.sh .venv/bin/python benchmarks/decode_throughput.py --quick
set -euo pipefail
export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
exec "$@"
