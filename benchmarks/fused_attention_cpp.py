"""Would a fused attention kernel pay? A plain C++ decode-attention kernel (one pass over each row's
keys and values per KV head, float32 math, ``at::parallel_for`` over rows x heads, compiled at
``-O3 -march=native`` by ``torch.utils.cpp_extension.load_inline``) against the lean step's eager
attention over the cache's contiguous reserved block, every layer of the default model's shapes,
random caches. Needs a C++ compiler and ninja; compiles once (~30 s) into ``--build-dir``.

    PYTHONPATH=src .venv/bin/python benchmarks/fused_attention_cpp.py [--build-dir /tmp/fused_attention_cpp]

Prints ms per step (all layers) both ways, their ratio and the largest difference of the outputs.
The kernel is written for the compiler to vectorise, not with intrinsics: in bf16 it competes with
oneDNN's AVX512-BF16 dot products.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.cpp_extension import load_inline

from decoding_adapters.lm.kv_cache import COLUMN_CHUNK
from decoding_adapters.lm.models import eager_attention

SOURCE = r'''
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <vector>

// q [B, H, G, D], keys / values [B, H, R, D], valid [B, R]: out [B, H, G, D]; float32 math.
template <typename T>
void attend_rows(const T* q, const T* keys, const T* values, const bool* valid, T* out,
                 int64_t B, int64_t H, int64_t G, int64_t R, int64_t D, float scale) {
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(G * D), scores(G * R), acc(G * D), row(D), top(G), total(G);
    for (int64_t bh = begin; bh < end; ++bh) {
      const T* qp = q + bh * G * D;
      const T* kp = keys + bh * R * D;
      const T* vp = values + bh * R * D;
      const bool* mask = valid + (bh / H) * R;
      for (int64_t i = 0; i < G * D; ++i) qf[i] = static_cast<float>(qp[i]) * scale;
      std::fill(top.begin(), top.end(), -INFINITY);
      for (int64_t r = 0; r < R; ++r) {  // one read of each key column for all G queries
        for (int64_t g = 0; g < G; ++g) scores[g * R + r] = -INFINITY;
        if (!mask[r]) continue;
        for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(kp[r * D + d]);
        for (int64_t g = 0; g < G; ++g) {
          const float* qg = qf.data() + g * D;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < D; ++d) dot += qg[d] * row[d];
          scores[g * R + r] = dot;
          top[g] = std::max(top[g], dot);
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        total[g] = 0.f;
        for (int64_t r = 0; r < R; ++r) {
          float e = std::exp(scores[g * R + r] - top[g]);
          scores[g * R + r] = e;
          total[g] += e;
        }
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t r = 0; r < R; ++r) {  // one read of each value column
        if (!mask[r]) continue;
        for (int64_t d = 0; d < D; ++d) row[d] = static_cast<float>(vp[r * D + d]);
        for (int64_t g = 0; g < G; ++g) {
          const float p = scores[g * R + r];
          float* a = acc.data() + g * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) a[d] += p * row[d];
        }
      }
      T* op = out + bh * G * D;
      for (int64_t g = 0; g < G; ++g)
        for (int64_t d = 0; d < D; ++d) op[g * D + d] = static_cast<T>(acc[g * D + d] / total[g]);
    }
  });
}

torch::Tensor attend(torch::Tensor q, torch::Tensor keys, torch::Tensor values, torch::Tensor valid,
                     double scale) {
  auto out = torch::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, q.scalar_type(), "attend", [&] {
    attend_rows<scalar_t>(q.data_ptr<scalar_t>(), keys.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(),
                          valid.data_ptr<bool>(), out.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2),
                          keys.size(2), q.size(3), static_cast<float>(scale));
  });
  return out;
}
'''


def best_ms(fn, n: int = 6) -> float:
    fn()
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="/tmp/fused_attention_cpp")
    args = parser.parse_args()
    os.makedirs(args.build_dir, exist_ok=True)
    start = time.time()
    ext = load_inline("fused_attention_cpp", cpp_sources=SOURCE, functions=["attend"],
                      extra_cflags=["-O3", "-march=native", "-fopenmp"], build_directory=args.build_dir)
    print(f"compiled in {time.time() - start:.0f} s", flush=True)
    layers, kv_heads, groups, head_dim, scale = 30, 3, 3, 64, 0.125  # the default model, SmolLM2-135M
    for dtype in (torch.bfloat16, torch.float32):
        for batch in (32, 128):
            for length in (75, 187):
                reserved = -(-length // COLUMN_CHUNK) * COLUMN_CHUNK
                q = torch.randn(batch, kv_heads, groups, head_dim).to(dtype)
                keys = torch.randn(layers, batch, kv_heads, reserved, head_dim).to(dtype)
                values = torch.randn(layers, batch, kv_heads, reserved, head_dim).to(dtype)
                valid = torch.zeros(batch, reserved, dtype=torch.bool)
                valid[:, :length] = True
                valid[0, :5] = False  # a left-padded row
                mask = torch.zeros(batch, 1, 1, reserved, dtype=dtype)
                mask.masked_fill_(~valid[:, None, None], float("-inf"))

                def eager(layer: int, q=q, keys=keys, values=values, mask=mask) -> torch.Tensor:
                    return eager_attention(q, keys[layer], values[layer], mask, scale)

                def fused(layer: int, q=q, keys=keys, values=values, valid=valid) -> torch.Tensor:
                    return ext.attend(q, keys[layer], values[layer], valid, scale)

                diff = (fused(0).float() - eager(0).float()).abs().max().item()
                eager_ms = best_ms(lambda eager=eager: [eager(layer) for layer in range(layers)])
                fused_ms = best_ms(lambda fused=fused: [fused(layer) for layer in range(layers)])
                print(
                    f"{str(dtype)[6:]} batch {batch}, {length} columns: eager on the block {eager_ms:.1f} ms, "
                    f"fused C++ {fused_ms:.1f} ms ({eager_ms / fused_ms:.2f}x), largest difference {diff:.1e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
