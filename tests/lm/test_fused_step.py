"""The fused step of the CUDA-graph path, on the CPU: the same tokens and close logits as the eager
lean step, concatenated weights that add no memory and leave HF's forward unchanged, attention
widths, tiles of rows, and a row's tokens independent of its batch mates on the graph path."""

from __future__ import annotations

import copy
import dataclasses
import time

import pytest
import torch

from conftest import CPU_ONLY, TEST_DEVICE, make_tiny_lm
from decoding_adapters.decoding.actions import GREEDY, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.cuda_graphs import batch_bucket, graphed_decoder
from decoding_adapters.lm.fused_step import WIDTH_ROUNDING, attended_width, fuse_projections
from decoding_adapters.lm.models import FrozenLM, GraphedRowCacheState
from decoding_adapters.lm.row_tiles import CUDA_ROW_TILE, RowTiles


def _prompts(lm):
    questions = ["What is 2+3?", "Hi", "Compute 17*23 now, please.", "x", "Say something long.", "7-4?"]
    return lm.encode_chat([[{"role": "user", "content": q}] for q in questions])


def _pair(dtype=torch.float32, compile_step=False):
    """The tiny LM on the graph path (eager replays off a GPU), and the same weights on the eager lean step.
    Compiled: with ``F.linear`` (the GPU's kernel; Inductor does not lower the CPU's oneDNN op at
    dynamic shapes)."""
    base = make_tiny_lm()
    base.model.to(dtype)
    spec = dataclasses.replace(base.spec, compile_step=compile_step)
    if compile_step:
        spec = dataclasses.replace(spec, linear_kernel="torch")
    fused = FrozenLM(base.model, base.tokenizer, spec)
    fused.graphs_without_capture = fused.device.type == "cpu"
    fused.graphs_compile_without_capture = compile_step
    eager = FrozenLM(base.model, base.tokenizer, dataclasses.replace(spec, cuda_graphs=False))
    return fused, eager


def _greedy_steps(lm, prompts, steps):
    """Greedy tokens and float32 logits of ``steps`` steps, fed by the state's own step."""
    tokens_out, logits_out = [], []
    with torch.inference_mode():
        _, logits, state = lm.start_decode(prompts, None, max_new_tokens=steps)
        for _ in range(steps):
            tokens = logits.argmax(-1)
            tokens_out.append(tokens.cpu())
            logits_out.append(logits.float().cpu().clone())
            _, logits = state.step(tokens)
    return torch.stack(tokens_out, 1), torch.stack(logits_out, 1)


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=CPU_ONLY)], ids=["fp32", "bf16"])
def test_fused_step_matches_the_eager_step_token_for_token(dtype):
    """bf16 on the CPU only: on a GPU the concatenated matmul is another cuBLAS kernel than the three it
    replaces, and bf16 rounds its outputs, so a near-tie may part the two over 40 steps."""
    fused, eager = _pair(dtype)
    prompts = _prompts(fused)
    ours, our_logits = _greedy_steps(fused, prompts, 40)  # crosses a width bucket (prompts ~30 + 40 > 64)
    theirs, their_logits = _greedy_steps(eager, prompts, 40)
    assert torch.equal(ours, theirs)
    tolerance = 1e-4 if dtype == torch.float32 else 0.1  # logits ~ 40x the default init (make_tiny_lm)
    assert (our_logits - their_logits).abs().max() <= tolerance * their_logits.abs().max()
    widths = {key[2] for key in fused._graphed_decoder.graphs if key[0] == "step"}
    assert len(widths) >= 2 and all(w % WIDTH_ROUNDING == 0 for w in widths)


def test_concatenated_weights_add_no_memory_and_leave_hf_forward_unchanged():
    lm = make_tiny_lm()
    ids, mask = lm.pad(_prompts(lm))
    with torch.inference_mode():
        before = lm.model(input_ids=ids, attention_mask=mask).logits
    storages = {p.untyped_storage().data_ptr() for p in lm.model.parameters()}
    elements = sum(p.numel() for p in lm.model.parameters())
    fuse_projections(lm)
    fuse_projections(lm)  # a second call changes nothing
    with torch.inference_mode():
        after = lm.model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(before, after)
    attn, mlp = lm.decoder.layers[0].self_attn, lm.decoder.layers[0].mlp
    qkv, _ = attn._fused_qkv
    assert attn.q_proj.weight.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr()
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == mlp._fused_gate_up[0].untyped_storage().data_ptr()
    assert sum(p.numel() for p in lm.model.parameters()) == elements
    # q/k/v and gate/up of each layer now share one storage each: fewer storages, none added
    assert len({p.untyped_storage().data_ptr() for p in lm.model.parameters()}) == len(storages) - 3 * len(
        lm.decoder.layers)


def test_a_model_cast_after_fusion_is_fused_again_in_its_new_dtype():
    """``model.to(bfloat16)`` after the graph path ran gives every parameter a new tensor but leaves the
    concatenated weights (plain attributes) in float32: the next fusion sees they are stale, concatenates
    the bf16 weights, and the graph path decodes as the eager step does (a copy of a fused model, cast,
    is the tests' bf16 fixture on cuda)."""
    fused, _ = _pair()
    prompts = _prompts(fused)
    decode(fused, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=3)  # fuses in float32
    model = copy.deepcopy(fused.model).to(torch.bfloat16)
    cast = FrozenLM(model, fused.tokenizer, fused.spec)
    cast.graphs_without_capture = cast.device.type == "cpu"
    eager = FrozenLM(model, fused.tokenizer, dataclasses.replace(fused.spec, cuda_graphs=False))
    ours = decode(cast, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=6, stop_token_ids=[])
    attn = cast.decoder.layers[0].self_attn
    qkv, _ = attn._fused_qkv
    assert qkv.dtype == torch.bfloat16 and attn.q_proj.weight.data_ptr() == qkv.data_ptr()
    theirs = decode(eager, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=6, stop_token_ids=[])
    assert torch.equal(ours.tokens[:, :1], theirs.tokens[:, :1])  # bf16: near-ties may part them later


def test_graph_path_rows_do_not_depend_on_their_batch_mates():
    """Each row decoded alone gives the tokens it gets in one batch with the others (the graph path
    keeps the row cache's layout: a row's position p in column p)."""
    fused, _ = _pair()
    prompts = _prompts(fused)
    together = decode(fused, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=20, stop_token_ids=[])
    for i, prompt in enumerate(prompts):
        alone = decode(fused, [prompt], ActionSet([GREEDY]), row_actions=0, token_budget=20, stop_token_ids=[])
        assert torch.equal(alone.tokens[0], together.tokens[i]), i


def test_a_row_keys_sit_at_its_positions_in_the_static_buffers():
    lm = make_tiny_lm()
    prompts = _prompts(lm)
    with torch.inference_mode():
        graphs = graphed_decoder(lm, len(prompts), 64, capture=False)
        _, _, layer_kv, mask = lm._prefill_in_groups(prompts, 0)
        cache = graphs.start(layer_kv, mask, None, 64)
    assert cache.length == max(len(p) for p in prompts)
    for row, prompt in enumerate(prompts):
        n = len(prompt)
        assert torch.equal(graphs.keys[0][row, :, :n], layer_kv[0][0][row, :, -n:])
        assert not graphs.keys[0][row, :, n:].any()


def test_attended_width_and_tiled_buckets():
    assert attended_width(1, 256) == WIDTH_ROUNDING
    assert attended_width(WIDTH_ROUNDING + 1, 256) == 2 * WIDTH_ROUNDING
    assert attended_width(250, 192) == 192
    with pytest.raises(ValueError):
        attended_width(0, 64)
    assert [batch_bucket(r, 128) for r in (1, 96, 128, 129)] == [128, 128, 128, 256]


def test_row_tiles_compute_every_row_on_whole_tiles():
    calls = []

    def spy(x, weight, bias=None):
        calls.append(x.shape[0])
        return torch.nn.functional.linear(x, weight, bias)

    tiles = RowTiles(spy, 4)
    weight, bias = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    x = torch.randn(2, 5, 3, dtype=torch.float64)  # 10 rows: 3 tiles of 4
    out = tiles(x, weight, bias)
    assert calls == [4, 4, 4] and out.shape == (2, 5, 5)
    assert torch.allclose(out, torch.nn.functional.linear(x, weight, bias))
    calls.clear()
    assert tiles(torch.randn(4, 3, dtype=torch.float64), weight).shape == (4, 5) and calls == [4]
    with pytest.raises(ValueError):
        RowTiles(spy, 0)


def test_row_tiles_give_a_row_the_same_bits_at_any_batch_size():
    """What the tiles are for: every call has the same M, so a row's result cannot depend on how many
    rows share the call, whatever the kernel does with M."""
    torch.manual_seed(0)
    weight = torch.randn(48, 40)
    rows = torch.randn(70, 40)
    tiles = RowTiles(torch.nn.functional.linear, 8)
    alone = torch.cat([tiles(rows[i:i + 1], weight) for i in range(len(rows))])
    for batch in (2, 5, 8, 13, 70):
        together = torch.cat([tiles(rows[i:i + batch], weight) for i in range(0, len(rows), batch)])
        assert torch.equal(together, alone), batch


def test_the_cpu_decode_keeps_the_eager_step_and_its_weights():
    """The CPU's default path (no graphs off a GPU) never concatenates weights nor takes the fused step."""
    lm = make_tiny_lm(device="cpu")
    weights = [p.data_ptr() for p in lm.model.parameters()]
    decode(lm, _prompts(lm), ActionSet([GREEDY]), row_actions=0, token_budget=4)
    assert not hasattr(lm.decoder.layers[0].self_attn, "_fused_qkv")
    assert getattr(lm, "_graphed_decoder", None) is None
    assert [p.data_ptr() for p in lm.model.parameters()] == weights


@pytest.mark.slow
def test_compiled_fused_step_matches_the_eager_step_token_for_token():
    """``torch.compile`` of the fused step (Inductor's C++ backend on the CPU, Triton on a GPU): the
    eager step's greedy tokens and close logits. Slow: the compilation takes tens of seconds on 2 cores."""
    fused, eager = _pair(compile_step=True)
    prompts = _prompts(fused)
    start = time.perf_counter()
    ours, our_logits = _greedy_steps(fused, prompts, 40)
    print(f"compiled greedy steps in {time.perf_counter() - start:.1f} s")
    theirs, their_logits = _greedy_steps(eager, prompts, 40)
    assert fused._graphed_decoder.compile_step
    assert torch.equal(ours, theirs)
    assert (our_logits - their_logits).abs().max() <= 1e-4 * their_logits.abs().max()


@pytest.mark.gpu
def test_fused_step_replayed_on_a_gpu_matches_the_eager_step():
    if TEST_DEVICE.type != "cuda":
        pytest.skip("the GPU lane: pytest --device cuda (make test-gpu)")
    for compile_step in (False, True):
        fused, eager = _pair(compile_step=compile_step)
        ours, _ = _greedy_steps(fused, _prompts(fused), 24)
        theirs, _ = _greedy_steps(eager, _prompts(fused), 24)
        assert fused._graphed_decoder.capture
        assert torch.equal(ours, theirs), compile_step


def test_a_step_that_fails_to_compile_runs_uncompiled():
    """A compiler failure (no Triton, no C compiler, an Inductor error) at the first call is logged and
    the uncompiled fused step takes over, giving the eager step's tokens."""
    fused, eager = _pair()
    prompts = _prompts(fused)

    def broken(*args):
        raise RuntimeError("no compiler here")

    on_gpu = fused.device.type == "cuda"  # the settings start_decode asks for, so that it reuses these buffers
    graphs = graphed_decoder(fused, len(prompts), 64, capture=on_gpu, row_tile=CUDA_ROW_TILE if on_gpu else None)
    graphs.step_fn = broken
    ours, _ = _greedy_steps(fused, prompts, 6)
    theirs, _ = _greedy_steps(eager, prompts, 6)
    assert fused._graphed_decoder is graphs and graphs.compile_failed.startswith("RuntimeError: no compiler here")
    assert torch.equal(ours, theirs)


def test_tiled_buckets_step_whole_tiles_and_keep_the_tokens():
    """With row tiles (a GPU's batch-invariant mode) every step runs on whole tiles of slots; rows
    dropped mid-decode leave the live rows a prefix, and the tokens are the eager step's."""
    fused, eager = _pair()
    prompts = _prompts(fused)
    with torch.inference_mode():
        _, logits, layer_kv, mask = fused._prefill_in_groups(prompts, 0)
        graphs = graphed_decoder(fused, len(prompts), 64, capture=fused.device.type == "cuda", row_tile=4)
        positions = torch.tensor([len(p) for p in prompts], device=fused.device)
        state = GraphedRowCacheState(graphs, graphs.start(layer_kv, mask, None, 64), positions)
        _, reference_logits, reference = eager.start_decode(prompts, None, max_new_tokens=20)
        live = torch.arange(len(prompts))
        for step in range(12):
            tokens = logits.argmax(-1)
            assert torch.equal(tokens, reference_logits.argmax(-1)), step
            if step in (3, 7):  # drop the first live row, then two more: 6 -> 5 -> 3 rows
                done = torch.zeros(len(live), dtype=torch.bool, device=tokens.device)
                done[: 1 if step == 3 else 2] = True
                order = state.drop(done)
                assert torch.equal(order, reference.drop(done))
                tokens, live = tokens[order], live[order.cpu()]
            _, logits = state.step(tokens)
            _, reference_logits = reference.step(tokens)
    assert {key[1] for key in graphs.graphs if key[0] == "step"} == {8, 4}
