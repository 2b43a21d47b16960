"""Row tiles: the LM's linear layers give a row the same bits whatever the number of rows in the call.

The kernels a CPU runs choose their blocking, instruction set and reduction split by the row count
M (oneDNN's bf16 kernels without AVX512-BF16 at most M, oneDNN's float32 lone row, a split of K
between threads on this EPYC's bf16 down projection at M >= 10 with 2 threads, AMX's blocking on
Xeons). These tests check, on the machine that runs them, that ``FrozenLM.linear`` with batch
invariance makes the question moot: every row of a call of 1..40 rows equals that row computed
alone, at every position, for every weight shape of the default model, in float32 and bf16; that
this holds under oneDNN's AVX512_CORE instruction set too (forced with ``ONEDNN_MAX_CPU_ISA``, where
the plain bf16 kernel does follow M); and that a kernel whose summation order follows M, as an AMX
CPU's does, does not reach the logits of a decode."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import make_tiny_lm
from decoding_adapters.lm import models
from decoding_adapters.lm.models import FrozenLM, ModelSpec, batch_invariant_linear
from decoding_adapters.lm.row_tiles import CPU_ROW_TILE, PackedRowTiles, RowTiles, onednn_packing_available

DEFAULT_SHAPES = ((576, 576), (192, 576), (1536, 576), (576, 1536), (4096, 576))
"""(out, in) of the default model's q/o, k/v, gate/up and down projections, and a slice of its LM head."""
ROW_COUNTS = range(1, 41)
CPU = torch.device("cpu")


def rows_differing(linear, dtype: torch.dtype, shapes=DEFAULT_SHAPES, row_counts=ROW_COUNTS) -> list[tuple]:
    """(shape, M) for every call of M rows in which some row's output is not bit-equal to that row alone."""
    gen = torch.Generator().manual_seed(0)
    differing = []
    for out_features, in_features in shapes:
        weight = torch.randn(out_features, in_features, generator=gen).to(dtype)
        x = torch.randn(max(row_counts), in_features, generator=gen).to(dtype)
        alone = torch.cat([linear(x[i:i + 1], weight, None) for i in range(len(x))])
        differing += [((out_features, in_features), m) for m in row_counts
                      if not torch.equal(linear(x[:m], weight, None), alone[:m])]
    return differing


def lm_linear(dtype: torch.dtype, kernel: str):
    tiny = make_tiny_lm(hidden_size=64)
    return FrozenLM(copy.deepcopy(tiny.model).to(dtype), tiny.tokenizer, ModelSpec("tiny", linear_kernel=kernel)).linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kernel", ["auto", "torch"])
def test_every_row_has_the_same_bits_in_calls_of_1_to_40_rows(dtype, kernel):
    linear = lm_linear(dtype, kernel)
    assert isinstance(linear, RowTiles) and linear.tile == CPU_ROW_TILE
    assert rows_differing(linear, dtype) == []


def test_the_default_kernels_pack_their_weights_for_onednn():
    for dtype in (torch.float32, torch.bfloat16):
        if onednn_packing_available(dtype, CPU):
            assert isinstance(lm_linear(dtype, "auto"), PackedRowTiles)
    assert type(lm_linear(torch.float32, "torch")) is RowTiles  # F.linear (MKL) on plain weights
    assert type(batch_invariant_linear("auto", F.linear, torch.float16, CPU)) is RowTiles


def test_packed_weights_are_packed_once_and_match_the_plain_kernel():
    tiles = PackedRowTiles(8)
    weight = torch.randn(48, 40)
    x = torch.randn(13, 40)
    first = tiles(x, weight)
    packed = tiles.prepared(weight)
    assert tiles.prepared(weight) is packed and len(tiles._packed) == 1
    torch.testing.assert_close(first, F.linear(x, weight), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        weight.mul_(2)  # frozen weights never change; if they do, they are packed again
    torch.testing.assert_close(tiles(x, weight), 2 * first, rtol=1e-5, atol=1e-5)
    del weight
    assert not tiles._packed  # dropped with the weight


CAPPED_CHECK = """
import json, torch, torch.nn.functional as F, sys
sys.path.insert(0, {tests!r})
from test_row_tiles import rows_differing
from decoding_adapters.lm.models import _onednn_linear, batch_invariant_linear
cpu = torch.device("cpu")
out = {{}}
for name, dtype, kernel in (("bf16", torch.bfloat16, F.linear), ("fp32", torch.float32, _onednn_linear)):
    out[name] = {{"plain": len(rows_differing(kernel, dtype, row_counts=range(1, 17))),
                 "tiles": len(rows_differing(batch_invariant_linear("auto", kernel, dtype, cpu), dtype))}}
print(json.dumps(out))
"""


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")
def test_tiles_hold_where_onednn_is_capped_below_avx512_bf16():
    """``ONEDNN_MAX_CPU_ISA=AVX512_CORE`` forces the kernels a CPU without AVX512-BF16 runs (bf16 by
    conversion, blocking chosen by M): the plain kernel gives rows other bits at most row counts;
    the tiles give none."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    tests = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", CAPPED_CHECK.format(tests=tests)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["bf16"]["tiles"] == 0 and counts["fp32"]["tiles"] == 0, counts
    if "avx512f" in Path("/proc/cpuinfo").read_text():
        assert counts["bf16"]["plain"] > 0 and counts["fp32"]["plain"] > 0, counts  # the cap does reach M


def test_a_kernel_whose_summation_follows_the_row_count_no_longer_reaches_the_logits(monkeypatch):
    """A stand-in for an AMX CPU's kernel: from 3 rows up it sums the reduction in two halves (as a
    split over threads does), below 3 in one pass, so a row's bits depend on M. With row tiles every
    call has the same M, and a row's prefill and step logits are the same alone as in a batch of
    three; the lone-row rule this replaced (a single row computed as two) let them differ."""

    def split_from_three_rows(x, weight, bias=None):
        if x.shape[:-1].numel() < 3:
            return F.linear(x, weight, bias)
        half = x.shape[-1] // 2
        return F.linear(x[..., :half], weight[:, :half], bias) + F.linear(x[..., half:], weight[:, half:])

    x, weight = torch.randn(6, 64), torch.randn(32, 64)
    assert not torch.equal(split_from_three_rows(x, weight)[:1], split_from_three_rows(x[:1], weight))
    monkeypatch.setattr(models, "resolve_linear_kernel", lambda *args: split_from_three_rows)
    tiny = make_tiny_lm(hidden_size=64)
    lm = FrozenLM(tiny.model, tiny.tokenizer, ModelSpec("tiny", linear_kernel="torch"))
    prompts = lm.encode_chat([[{"role": "user", "content": q}] for q in ("1+1=", "a much longer question", "?")])

    def logits_of(batch):
        with torch.inference_mode():
            _, logits, state = lm.start_decode(batch, None, max_new_tokens=4)
            steps = [logits]
            for token in (3, 7):
                steps.append(state.step(torch.full((len(batch),), token))[1])
        return steps

    together = logits_of(prompts)
    for row, prompt in enumerate(prompts):
        alone = logits_of([prompt])
        assert all(torch.equal(a[0], b[row]) for a, b in zip(alone, together)), row
