"""RowKVCache: prefill fan-out, in-place writes, swap-remove shrinking; the lean step vs HF's forward."""

import copy

import pytest
import torch
import torch.nn.functional as F

from conftest import CPU_ONLY
from decoding_adapters.lm.kv_cache import COLUMN_CHUNK, RowKVCache
from decoding_adapters.lm.models import (
    DynamicCacheState,
    FrozenLM,
    ModelSpec,
    RowCacheState,
    _onednn_linear,
    prefill_groups,
    resolve_linear_kernel,
)


def _filled_cache(rows=6, width=3, capacity=8, layers=2, heads=2, head_dim=4):
    gen = torch.Generator().manual_seed(0)
    kv = [
        (
            torch.randn(rows, heads, width, head_dim, generator=gen),
            torch.randn(rows, heads, width, head_dim, generator=gen),
        )
        for _ in range(layers)
    ]
    mask = torch.ones(rows, width, dtype=torch.long)
    return RowKVCache.from_prefill(kv, mask, None, capacity), kv


def test_prefill_fan_out_copies_each_prompt_to_its_rows():
    kv = [(torch.arange(2 * 1 * 2 * 1.0).view(2, 1, 2, 1), -torch.arange(2 * 1 * 2 * 1.0).view(2, 1, 2, 1))]
    mask = torch.tensor([[0, 1], [1, 1]])
    cache = RowKVCache.from_prefill(kv, mask, torch.tensor([1, 0, 1]), capacity=5)
    assert cache.length == 2 and cache.live == 3 and cache.columns.tolist() == [2, 1, 2]
    # every prompt starts at column 0: prompt 0's one token moves left, a masked zero after it
    assert cache.keys[0, :, 0, :2, 0].tolist() == [[2.0, 3.0], [1.0, 0.0], [2.0, 3.0]]
    assert cache.values[0, :, 0, :2, 0].tolist() == [[-2.0, -3.0], [-1.0, 0.0], [-2.0, -3.0]]
    assert cache.valid[:, :2].tolist() == [[True, True], [True, False], [True, True]]


def test_write_is_in_place_and_returns_the_reserved_block():
    cache, kv = _filled_cache(capacity=8)
    mask = cache.open_column()
    assert cache.reserved == 8  # the prompt's 3 columns and a chunk, up to the capacity
    assert mask.shape == (6, 1, 1, 8) and mask[:, 0, 0, :4].all()
    assert not mask[:, 0, 0, 4:].any()  # reserved, not filled yet
    new = torch.full((6, 2, 1, 4), 7.0)
    keys, values = cache.write(1, new, -new)
    assert keys.shape == (6, 2, 8, 4) and keys.data_ptr() == cache.keys[1].data_ptr()  # a view, not a copy
    assert keys.is_contiguous() and values.is_contiguous()  # what bf16 batched matmuls read without copying
    assert torch.equal(keys[:, :, :3], kv[1][0]) and (keys[:, :, 3] == 7).all() and (values[:, :, 3] == -7).all()
    assert (keys[:, :, 4:] == 0).all() and (values[:, :, 4:] == 0).all()  # zeros: masked, they add nothing
    cache.close_column()
    assert cache.length == 4


def test_a_full_reserve_grows_by_a_chunk_keeping_the_live_rows():
    """The reserve is whole chunks (the prompt's 3 columns rounded up to one, plus one) and grows by a
    chunk; only the last one, cut at the capacity, may be partial."""
    capacity = 3 * COLUMN_CHUNK + 5
    cache, kv = _filled_cache(capacity=capacity)
    assert cache.reserved == 2 * COLUMN_CHUNK
    for column in range(3, 2 * COLUMN_CHUNK + 1):
        if column == 10:
            cache.drop(torch.tensor([False, False, False, False, True, True]))
        mask = cache.open_column()
        for layer in range(2):
            fill = torch.full((cache.live, 2, 1, 4), float(column))
            keys, values = cache.write(layer, fill, -fill)
        cache.close_column()
    assert cache.reserved == 3 * COLUMN_CHUNK and mask.shape == (4, 1, 1, 3 * COLUMN_CHUNK)
    assert keys.is_contiguous() and torch.equal(keys[:, :, :3], kv[1][0][:4])
    filled = torch.arange(3, 2 * COLUMN_CHUNK + 1, dtype=torch.float32)
    assert torch.equal(keys[0, 0, 3 : 2 * COLUMN_CHUNK + 1, 0], filled)
    assert (keys[:, :, 2 * COLUMN_CHUNK + 1 :] == 0).all()
    assert mask[:, 0, 0, : 2 * COLUMN_CHUNK + 1].all() and not mask[:, 0, 0, 2 * COLUMN_CHUNK + 1 :].any()
    while cache.length < cache.reserved:
        cache.open_column()
        cache.close_column()
    cache.open_column()
    assert cache.reserved == capacity  # the last chunk stops at the capacity


def test_drop_moves_only_finished_slots_and_keeps_every_survivor():
    cache, kv = _filled_cache()
    before_keys, before_valid = cache.keys.clone(), cache.valid.clone()
    done = torch.tensor([True, False, False, True, False, False])  # rows 0 and 3 finish
    order = cache.drop(done)
    assert cache.live == 4 and sorted(order.tolist()) == [1, 2, 4, 5]
    assert order[1:3].tolist() == [1, 2]  # rows already inside [0, live) stay where they are
    for new_slot, old_slot in enumerate(order.tolist()):
        assert torch.equal(cache.keys[:, new_slot, :, :3], before_keys[:, old_slot, :, :3])
        assert torch.equal(cache.valid[new_slot], before_valid[old_slot])
    with pytest.raises(ValueError, match="one flag per live row"):
        cache.drop(torch.zeros(6, dtype=torch.bool))


def test_a_full_cache_refuses_another_column():
    cache, _ = _filled_cache(capacity=3)
    with pytest.raises(ValueError, match="full"):
        cache.open_column()


def _run_states(lm, prompts, fan_out, steps, row_cache, group_cost=10**9):
    """Logits of every step; one prefill group unless ``group_cost`` says otherwise."""
    hidden, logits, state = lm.start_decode(prompts, fan_out, steps, row_cache=row_cache, group_cost=group_cost)
    assert isinstance(state, RowCacheState if row_cache else DynamicCacheState)
    out, active = [(hidden, logits.cpu())], torch.arange(len(hidden))
    for t in range(steps - 1):
        tokens = logits.argmax(-1)
        if t == 2:  # drop rows 0 and 2 (of the batch as it is now)
            done = torch.zeros(len(tokens), dtype=torch.bool, device=tokens.device)
            done[[0, 2]] = True
            order = state.drop(done)
            tokens, active = tokens[order], active[order.cpu()]
        hidden, logits = state.step(tokens)
        full = torch.full((len(prompts) if fan_out is None else len(fan_out), logits.shape[1]), float("nan"))
        full[active] = logits.cpu()
        out.append((hidden, full))
    return out


@pytest.mark.parametrize("kernel", ["torch", pytest.param("onednn", marks=CPU_ONLY)])
def test_lean_row_cache_step_matches_hf_forward_with_dynamic_cache(tiny_lm, tiny_prompts, kernel):
    """HF's forward runs its linear layers through the same kernel as the lean step
    (``FrozenLM.linear_kernel``), both prefilled at one width. The lean step's attention also sums
    over the masked (zero) columns of the cache's reserve, so the logits agree to float32 rounding
    (measured: 2e-6 at most) and every greedy pick is the same."""
    lm = FrozenLM(tiny_lm.model, tiny_lm.tokenizer, ModelSpec("tiny", linear_kernel=kernel))
    fan_out = torch.tensor([0, 1, 1, 2, 3, 0])
    lean = _run_states(lm, tiny_prompts, fan_out, 7, row_cache=True)
    reference = _run_states(lm, tiny_prompts, fan_out, 7, row_cache=False)
    for (_, a), (_, b) in zip(lean, reference):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5, atol=1e-5)
        live = ~a[:, 0].isnan()
        assert torch.equal(a[live].argmax(-1), b[live].argmax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_in_length_groups_matches_one_padded_batch(tiny_lm, tiny_prompts, dtype):
    """Prompts of 20-45 tokens prefill as two groups, each padded to its own longest: fewer padded
    tokens go through the model, and every step's logits match the one-width prefill up to rounding
    (a reduction over another padded width), so greedy picks the same tokens."""
    lm = FrozenLM(copy.deepcopy(tiny_lm.model).to(dtype), tiny_lm.tokenizer, ModelSpec("tiny"))
    widths = []
    forward = lm.forward
    lm.forward = lambda ids, *args: widths.append(tuple(ids.shape)) or forward(ids, *args)
    fan_out = torch.tensor([0, 1, 1, 2, 3, 0])
    grouped = _run_states(lm, tiny_prompts, fan_out, 7, row_cache=True, group_cost=0)
    assert len(widths) > 1 and sum(r * w for r, w in widths) < len(tiny_prompts) * max(map(len, tiny_prompts))
    one_width = _run_states(lm, tiny_prompts, fan_out, 7, row_cache=True)
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.05}
    for (_, a), (_, b) in zip(grouped, one_width):
        torch.testing.assert_close(a, b, equal_nan=True, **tolerance)
        live = ~a[:, 0].isnan()
        assert torch.equal(a[live].argmax(-1), b[live].argmax(-1))


@CPU_ONLY
def test_prefill_runs_every_linear_layer_through_the_chosen_kernel(tiny_lm, tiny_prompts):
    lm = FrozenLM(tiny_lm.model, tiny_lm.tokenizer, ModelSpec("tiny", linear_kernel="onednn"))
    calls, kernel = [], lm.linear
    lm.linear = lambda *args: calls.append(args[1].shape) or kernel(*args)
    lm.start_decode(tiny_prompts, None, max_new_tokens=2)
    # batch-invariant on a CPU by default: one packed pass over every prompt; per layer q, k, v, o, gate,
    # up, down, then the LM head
    config = tiny_lm.model.config
    assert lm.prefill == "packed" and len(calls) == 7 * config.num_hidden_layers + 1
    assert calls[-1] == lm.lm_head.weight.shape
    # the length groups' path: one forward per prompt length (group cost 0)
    calls.clear()
    lm.prefill = "lengths"
    lm.start_decode(tiny_prompts, None, max_new_tokens=2)
    groups = len(prefill_groups([len(p) for p in tiny_prompts], 0))
    assert len(calls) == (7 * config.num_hidden_layers + 1) * groups and calls[-1] == lm.lm_head.weight.shape


def test_auto_linear_kernel_is_onednn_for_float32_on_cpu_only():
    cpu = torch.device("cpu")
    assert resolve_linear_kernel("auto", torch.float32, cpu) is _onednn_linear
    assert resolve_linear_kernel("auto", torch.bfloat16, cpu) is F.linear
    assert resolve_linear_kernel("torch", torch.float32, cpu) is F.linear
    with pytest.raises(ValueError, match="CPU"):
        resolve_linear_kernel("onednn", torch.float32, torch.device("meta"))
    with pytest.raises(ValueError, match="linear_kernel"):
        ModelSpec(linear_kernel="mkl")


def test_rows_of_other_lengths_write_their_own_next_column():
    """A row's tokens sit at their positions whatever its mates' lengths: a row with a 1-token prompt
    writes column 1 while its mate with 2 tokens writes column 2, in the same step."""
    kv = [(torch.ones(2, 1, 2, 1), torch.ones(2, 1, 2, 1))]
    cache = RowKVCache.from_prefill(kv, torch.tensor([[0, 1], [1, 1]]), None, capacity=6)
    mask = cache.open_column()
    keys, _ = cache.write(0, torch.tensor([5.0, 7.0]).view(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))
    cache.close_column()
    assert keys[:, 0, :4, 0].tolist() == [[1.0, 5.0, 0.0, 0.0], [1.0, 1.0, 7.0, 0.0]]
    assert mask[:, 0, 0, :4].tolist() == [[True, True, False, False], [True, True, True, False]]
    assert cache.columns.tolist() == [2, 3] and cache.length == 3
