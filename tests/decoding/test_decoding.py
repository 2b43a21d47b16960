"""The decode loop: parity with HF generate, batch-shrinking invariance, seeds, choosers, EOS."""

import copy

import pytest
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import StepFeatures, decode
from decoding_adapters.lm.models import FrozenLM, ModelSpec, load_frozen_lm

TOKEN_ACTIONS = ActionSet(PRESETS["math-token"])


@pytest.fixture(scope="module", params=["float32/sdpa/auto", "float32/eager/auto", "float32/eager/torch",
                                        "bfloat16/sdpa/auto", "bfloat16/eager/auto"])
def any_lm(request, tiny_lm):
    """The tiny LM in each dtype, HF attention implementation the lean step follows, and linear kernel
    (auto is oneDNN in float32, ``F.linear`` in bf16)."""
    dtype, attention, kernel = request.param.split("/")
    model = copy.deepcopy(tiny_lm.model).to(getattr(torch, dtype))
    model.set_attn_implementation(attention)
    lm = FrozenLM(model, tiny_lm.tokenizer, ModelSpec("tiny", linear_kernel=kernel))
    assert lm.supports_row_cache and lm.model.config._attn_implementation == attention
    return lm


def _assert_matches_generate(lm, prompts, result, max_new_tokens, **generate_kw):
    ids, mask = lm.pad(prompts)
    ref = lm.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                            pad_token_id=lm.tokenizer.pad_token_id, **generate_kw)
    for row in range(len(prompts)):
        n = int(result.lengths[row])
        assert result.tokens[row, :n].tolist() == ref[row, ids.shape[1] : ids.shape[1] + n].tolist()


def test_greedy_matches_hf_generate_token_for_token(any_lm, tiny_prompts):
    """fp32: token-identical to generate(); bf16: identical to generate() run in bf16 on the same rows."""
    result = decode(any_lm, tiny_prompts, TOKEN_ACTIONS, row_actions=0, token_budget=20)
    _assert_matches_generate(any_lm, tiny_prompts, result, 20)
    assert (result.lengths == 20).all() or result.stopped_at_eos.any()


def test_greedy_matches_hf_generate_with_eos(any_lm, tiny_prompts):
    """Stop on a frequent token so rows end at different steps (and the batch shrinks)."""
    stop = [any_lm.tokenizer.convert_tokens_to_ids(c) for c in ".,r"]
    result = decode(any_lm, tiny_prompts, TOKEN_ACTIONS, row_actions=0, token_budget=25, stop_token_ids=stop)
    assert result.stopped_at_eos.any() and len(set(result.lengths.tolist())) > 1
    _assert_matches_generate(any_lm, tiny_prompts, result, 25, eos_token_id=stop)


def _sampled(lm, prompts, **kw):
    return decode(
        lm,
        prompts,
        TOKEN_ACTIONS,
        prompt_of_row=[0, 0, 1, 1, 2, 3],
        row_actions=[2, 3, 1, 2, 3, 2],
        row_seeds=[11, 12, 13, 14, 15, 16],
        **kw,
    )


def test_same_seed_same_output_and_different_seed_differs(tiny_lm, tiny_prompts):
    a, b = _sampled(tiny_lm, tiny_prompts, token_budget=16), _sampled(tiny_lm, tiny_prompts, token_budget=16)
    assert torch.equal(a.tokens, b.tokens)
    c = decode(
        tiny_lm,
        tiny_prompts,
        TOKEN_ACTIONS,
        prompt_of_row=[0, 0, 1, 1, 2, 3],
        row_actions=[2, 3, 1, 2, 3, 2],
        seed=99,
        token_budget=16,
    )
    assert not torch.equal(a.tokens, c.tokens)


def test_shrinking_the_batch_changes_no_rows_output(tiny_lm, tiny_prompts):
    """Rows with different budgets finish at different steps and are dropped; each row must match
    the same row decoded alone."""
    budgets = [3, 16, 5, 16, 1, 9]
    together = _sampled(tiny_lm, tiny_prompts, token_budget=budgets)
    seeds = [11, 12, 13, 14, 15, 16]
    prompt_of_row, actions = [0, 0, 1, 1, 2, 3], [2, 3, 1, 2, 3, 2]
    for row in range(6):
        alone = decode(
            tiny_lm,
            [tiny_prompts[prompt_of_row[row]]],
            TOKEN_ACTIONS,
            row_actions=actions[row],
            row_seeds=[seeds[row]],
            token_budget=budgets[row],
        )
        assert alone.tokens[0, : alone.lengths[0]].tolist() == together.tokens[row, : together.lengths[row]].tolist()
        assert int(together.lengths[row]) == budgets[row]


def test_shared_prefill_equals_separate_prompts(tiny_lm, tiny_prompts):
    shared = decode(
        tiny_lm,
        tiny_prompts[:2],
        TOKEN_ACTIONS,
        prompt_of_row=[0, 0, 1],
        row_actions=2,
        row_seeds=[1, 2, 3],
        token_budget=12,
    )
    separate = decode(
        tiny_lm,
        [tiny_prompts[0], tiny_prompts[0], tiny_prompts[1]],
        TOKEN_ACTIONS,
        row_actions=2,
        row_seeds=[1, 2, 3],
        token_budget=12,
    )
    assert torch.equal(shared.tokens, separate.tokens)


def test_chooser_sees_features_and_its_actions_are_recorded(tiny_lm, tiny_prompts):
    seen: list[StepFeatures] = []

    def chooser(f: StepFeatures) -> torch.Tensor:
        seen.append(f)
        return (f.step + f.rows) % len(TOKEN_ACTIONS)  # depends on time and row

    result = decode(tiny_lm, tiny_prompts, TOKEN_ACTIONS, chooser=chooser, token_budget=6, record_features=True)
    first = seen[0]
    assert first.hidden.shape == (4, tiny_lm.hidden_size)
    assert torch.equal(first.remaining_budget.cpu(), torch.full((4,), 6))
    assert ((first.entropy >= 0) & (first.max_prob <= 1) & (first.uniform < 1)).all()
    for row, traj in enumerate(result.trajectories()):
        assert traj.actions == [(t + row) % 4 for t in range(len(traj.token_ids))]
        assert traj.features.shape == (len(traj.token_ids), tiny_lm.hidden_size)
        assert len(traj.entropies) == len(traj.max_probs) == len(traj.token_ids)


def test_budget_and_stop_reasons(tiny_lm, tiny_prompts):
    result = decode(
        tiny_lm, tiny_prompts, ActionSet([DecodingAction(temperature=1.0)]), row_actions=0, token_budget=[1, 2, 3, 4]
    )
    assert result.lengths.tolist() == [1, 2, 3, 4]
    assert all(t.stop_reason == "budget" for t in result.trajectories())


@pytest.fixture(scope="module")
def tiny_lm_bf16(tiny_lm):
    return FrozenLM(copy.deepcopy(tiny_lm.model).to(torch.bfloat16), tiny_lm.tokenizer)


def test_bf16_rows_do_not_depend_on_their_batch_mates(tiny_lm_bf16, tiny_prompts):
    budgets = [3, 12, 5, 12, 1, 9]
    together = _sampled(tiny_lm_bf16, tiny_prompts, token_budget=budgets)
    for row in (1, 3, 5):
        alone = decode(
            tiny_lm_bf16,
            [tiny_prompts[[0, 0, 1, 1, 2, 3][row]]],
            TOKEN_ACTIONS,
            row_actions=[2, 3, 1, 2, 3, 2][row],
            row_seeds=[11 + row],
            token_budget=budgets[row],
        )
        assert alone.tokens[0].tolist() == together.tokens[row, : budgets[row]].tolist()


def test_hf_forward_fallback_decodes_the_same_tokens(tiny_lm, tiny_prompts, monkeypatch):
    """Architectures without the row cache go through HF's forward and DynamicCache: same rows."""
    lean = _sampled(tiny_lm, tiny_prompts, token_budget=[3, 16, 5, 16, 1, 9])
    monkeypatch.setattr(FrozenLM, "supports_row_cache", property(lambda self: False))
    fallback = _sampled(tiny_lm, tiny_prompts, token_budget=[3, 16, 5, 16, 1, 9])
    assert torch.equal(lean.tokens, fallback.tokens) and torch.equal(lean.lengths, fallback.lengths)


def test_token_budgets_are_recorded(tiny_lm, tiny_prompts):
    result = decode(tiny_lm, tiny_prompts, TOKEN_ACTIONS, row_actions=0, token_budget=[2, 4, 6, 8])
    assert result.token_budgets.tolist() == [2, 4, 6, 8]


@pytest.mark.parametrize("attention, expected", [("auto", "eager"), ("sdpa", "sdpa"), ("eager", "eager")])
def test_loaded_llama_on_cpu_uses_the_attention_the_spec_asks_for(tiny_model_dir, attention, expected):
    """auto: eager where the lean step runs (a Llama on CPU)."""
    lm = load_frozen_lm(ModelSpec(str(tiny_model_dir), device="cpu", dtype="float32", attention=attention))
    assert lm.model.config._attn_implementation == expected


def test_auto_attention_keeps_hf_default_where_the_lean_step_does_not_run(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(FrozenLM, "supports_row_cache", property(lambda self: False))
    lm = load_frozen_lm(ModelSpec(str(tiny_model_dir), dtype="float32"))
    assert lm.model.config._attn_implementation == "sdpa"
