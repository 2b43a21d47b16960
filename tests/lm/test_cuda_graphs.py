"""The CUDA-graph decode path: batch buckets, and the same tokens as the eager lean step.

On the CPU (the default lane) the graph path's static buffers, buckets and row dropping run with
each replay done eagerly (``FrozenLM.graphs_without_capture``); with ``--device cuda`` (``make
test-gpu``) the steps are captured and replayed for real."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import TEST_DEVICE, make_tiny_lm
from decoding_adapters.decoding.actions import GREEDY, PRESETS, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.cuda_graphs import batch_bucket, graphed_decoder
from decoding_adapters.lm.models import FrozenLM, GraphedRowCacheState, RowCacheState
from decoding_adapters.policies.networks import UniformChooser


def test_batch_buckets_cover_every_size_with_at_most_a_third_padding():
    sizes = [batch_bucket(r) for r in range(1, 200)]
    assert sizes[:8] == [1, 2, 3, 4, 6, 6, 8, 8]
    assert all(s >= r and s <= max(2, r * 3 // 2 + 1) for r, s in zip(range(1, 200), sizes))
    with pytest.raises(ValueError):
        batch_bucket(0)


def _pair():
    """The tiny LM with the graph path on, and the same weights with the eager lean step."""
    graphed = make_tiny_lm()
    graphed.graphs_without_capture = graphed.device.type == "cpu"
    eager = FrozenLM(graphed.model, graphed.tokenizer, dataclasses.replace(graphed.spec, cuda_graphs=False))
    return graphed, eager


def _prompts(lm):
    questions = ["What is 2+3?", "Hi", "Compute 17*23 now, please.", "x", "Say something long.", "7-4?", "ok", "a b"]
    return lm.encode_chat([[{"role": "user", "content": q}] for q in questions])


ACTION_SETS = {
    "greedy": [GREEDY],
    "t1": [DecodingAction(temperature=1.0)],
    "math-token": list(PRESETS["math-token"]),
    "truncations": [GREEDY, DecodingAction(temperature=0.7, top_k=5), DecodingAction(temperature=1.0, top_p=0.9),
                    DecodingAction(temperature=1.2, min_p=0.05)],
}


@pytest.mark.parametrize("name", ACTION_SETS)
@pytest.mark.parametrize("per_token", [False, True], ids=["fixed", "chooser"])
def test_graph_path_decodes_the_tokens_of_the_eager_step(name, per_token):
    """Step, statistics and sampler from the graph path (on the CPU: the same code run eagerly on the
    static buffers) give the eager lean step's tokens, with a fixed action per row or a chooser."""
    graphed, eager = _pair()
    prompts = _prompts(graphed)
    actions = ActionSet(ACTION_SETS[name])
    # rows of several budgets finish at different steps, so the live batch crosses bucket sizes
    rows = torch.arange(24) % len(prompts)
    budgets = [3 + (i * 5) % 29 for i in range(24)]
    how = {"chooser": UniformChooser(len(actions))} if per_token else {"row_actions": torch.arange(24) % len(actions)}
    runs = [decode(lm, prompts, actions, prompt_of_row=rows, token_budget=budgets, seed=3, **how)
            for lm in (graphed, eager)]
    assert torch.equal(runs[0].actions, runs[1].actions)
    assert torch.equal(runs[0].lengths, runs[1].lengths)
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].texts == runs[1].texts


def test_graph_path_is_the_one_taken_and_reuses_its_buffers():
    graphed, eager = _pair()
    prompts = _prompts(graphed)
    _, _, state = graphed.start_decode(prompts, None, max_new_tokens=8)
    assert isinstance(state, GraphedRowCacheState)
    first = graphed._graphed_decoder
    graphed.start_decode(prompts[:3], None, max_new_tokens=8)
    assert graphed._graphed_decoder is first  # fewer rows, same rounded length: same buffers
    assert type(eager.start_decode(prompts, None, max_new_tokens=8)[2]) is RowCacheState


def test_buffers_grow_for_more_rows_and_change_for_other_lengths():
    lm = make_tiny_lm()
    capture = TEST_DEVICE.type == "cuda"
    small = graphed_decoder(lm, 4, 40, capture)
    assert (small.rows, small.columns) == (4, 64)
    bigger = graphed_decoder(lm, 9, 40, capture)
    assert bigger is not small and bigger.rows == batch_bucket(9)
    longer = graphed_decoder(lm, 2, 100, capture)
    assert longer.columns == 128 and lm._graphed_decoder is longer


def test_an_interleaved_decode_on_the_same_buffers_is_refused():
    graphed, _ = _pair()
    prompts = _prompts(graphed)
    _, logits, first = graphed.start_decode(prompts, None, max_new_tokens=8)
    graphed.start_decode(prompts[:2], None, max_new_tokens=8)  # same buffers, overwritten
    with pytest.raises(RuntimeError, match="interleave"):
        first.step(logits.argmax(-1))


@pytest.mark.gpu
def test_steps_replay_captured_graphs_on_a_gpu():
    if TEST_DEVICE.type != "cuda":
        pytest.skip("the GPU lane: pytest --device cuda (make test-gpu)")
    graphed, eager = _pair()
    prompts = _prompts(graphed)
    result = decode(graphed, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=[4, 9, 2, 7, 5, 3, 8, 6])
    buffers = graphed._graphed_decoder
    steps = {key[1] for key in buffers.graphs if key[0] == "step"}
    # a step graph per bucket and a sampler graph per step graph; with row tiles every bucket is one tile
    assert buffers.capture and buffers.keys[0].is_cuda and len(buffers.graphs) >= (2 if buffers.row_tile else 3)
    assert steps == {128} if buffers.row_tile else (8 in steps and len(steps) >= 3)
    reference = decode(eager, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=[4, 9, 2, 7, 5, 3, 8, 6])
    assert torch.equal(result.tokens, reference.tokens)


def test_bucket_slots_no_row_uses_stay_finite():
    """5 rows run in the 6-row bucket (a whole 128-row tile with the GPU's row tiles): the slots after
    the fifth never held a prompt, yet their statistics and draws are computed (and thrown away) at
    every step; nothing there may be NaN (eager attention: a softmax over no column is NaN there)."""
    graphed, eager = _pair()
    graphed.model.set_attn_implementation("eager")
    prompts = _prompts(graphed)[:5]
    runs = [decode(lm, prompts, ActionSet([DecodingAction(temperature=1.0)]), row_actions=0, token_budget=6, seed=1)
            for lm in (graphed, eager)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    buffers = graphed._graphed_decoder
    keys = [key for key in buffers.graphs if key[0] == "step" and key[1] == batch_bucket(5, buffers.row_tile)]
    assert keys
    for key in keys:
        _, logits, *stats = buffers.outputs(key)
        assert not logits.isnan().any() and not any(t.float().isnan().any() for t in stats)
