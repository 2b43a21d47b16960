"""Decoding actions: validation, presets, per-row transforms vs HF warpers, sampling."""

import math

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from decoding_adapters.decoding.actions import (
    ACTION_STREAM,
    PRESETS,
    ActionSet,
    DecodingAction,
    apply_top_k,
    apply_top_p,
    candidate_pool,
    counter_uniform,
    inverse_cdf_sample,
    load_action_set,
    sample,
    token_logprobs,
    transform_logits,
)


@pytest.mark.parametrize(
    "kwargs",
    [dict(temperature=-0.1), dict(top_k=0), dict(top_k=2.5), dict(top_p=0.0), dict(top_p=1.2), dict(min_p=1.0),
     dict(min_p=-0.1), dict(temperature=float("nan"))],
)
def test_invalid_actions_are_rejected(kwargs):
    with pytest.raises(ValueError):
        DecodingAction(**kwargs)


def test_greedy_flags_and_names():
    assert DecodingAction(do_sample=False).is_greedy
    assert DecodingAction(temperature=0.0).is_greedy
    assert DecodingAction(temperature=0.75, top_p=0.9, min_p=0.1).name == "T=0.75,top_p=0.9,min_p=0.1"
    a = DecodingAction(temperature=1.25, top_k=10)
    assert DecodingAction.from_dict(a.to_dict()) == a


def test_presets_and_pool_match_the_paper():
    assert [len(PRESETS[k]) for k in ("math", "coding", "mix", "math-token")] == [6, 6, 6, 4]
    pool = candidate_pool()
    assert len(pool) == 180 and len(set(pool)) == 180
    assert PRESETS["math-token"][0].is_greedy and [a.temperature for a in PRESETS["math-token"][1:]] == [0.5, 1.0, 1.25]
    assert load_action_set("pool") == pool


def test_load_action_set_from_file_and_errors(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"actions": [{"do_sample": false, "temperature": 0.0, '
                    '"top_k": null, "top_p": null, "min_p": null}]}')
    assert load_action_set(path)[0].is_greedy
    with pytest.raises(ValueError, match="neither a preset"):
        load_action_set("no-such-preset")


def hf_reference(logits_row: torch.Tensor, action: DecodingAction) -> torch.Tensor:
    """HF's warpers in HF's order, for one row."""
    x = logits_row.unsqueeze(0)
    x = TemperatureLogitsWarper(action.temperature)(None, x)
    if action.top_k:
        x = TopKLogitsWarper(action.top_k)(None, x)
    if action.top_p and action.top_p < 1:
        x = TopPLogitsWarper(action.top_p)(None, x)
    if action.min_p:
        x = MinPLogitsWarper(action.min_p)(None, x)
    return x.squeeze(0)


def test_per_row_transforms_match_hf_warpers_row_by_row():
    gen = torch.Generator().manual_seed(0)
    actions = candidate_pool()[::7] + list(PRESETS["coding"])
    aset = ActionSet(actions)
    logits = torch.randn(len(actions), 300, generator=gen) * 3
    ours = transform_logits(logits, aset.params(torch.arange(len(actions))))
    for i, action in enumerate(actions):
        ref = hf_reference(logits[i], action)
        assert torch.equal(torch.isinf(ours[i]), torch.isinf(ref)), action.name
        kept = ~torch.isinf(ref)
        torch.testing.assert_close(ours[i][kept], ref[kept])


def test_top_k_keeps_ties_and_off_means_off():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.5, 2.0], [1.0, 3.0, 3.0, 0.5, 2.0]])
    out = apply_top_k(logits, torch.tensor([1, 0]))
    assert torch.isfinite(out[0]).tolist() == [False, True, True, False, False]  # both tied maxima kept
    assert torch.isfinite(out[1]).all()


def test_top_p_one_is_a_no_op_and_keeps_the_top_token():
    logits = torch.tensor([[10.0, 0.0, -5.0], [10.0, 0.0, -5.0]])
    out = apply_top_p(logits, torch.tensor([1.0, 1e-6]))
    assert torch.equal(out[0], logits[0])
    assert torch.isfinite(out[1]).tolist() == [True, False, False]


def test_greedy_rows_take_the_exact_argmax_of_raw_logits():
    aset = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=1e-9)])
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(1))
    params = aset.params(torch.tensor([0, 0]))
    tokens = sample(logits, transform_logits(logits, params), params.greedy, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, logits.argmax(-1))
    # a tiny but non-zero temperature samples without NaNs and lands on the argmax
    params = aset.params(torch.tensor([1, 1]))
    tokens = sample(logits, transform_logits(logits, params), params.greedy, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, logits.argmax(-1))


def test_sampled_frequencies_match_the_transformed_distribution():
    """Chi-square goodness of fit on a 6-token vocabulary, for three actions at once."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -1.0])
    actions = [DecodingAction(temperature=0.7), DecodingAction(temperature=1.3, top_k=4), DecodingAction(top_p=0.8)]
    aset = ActionSet(actions)
    draws = 20000
    idx = torch.arange(3).repeat_interleave(draws)
    params = aset.params(idx)
    batch = logits.expand(len(idx), -1)
    transformed = transform_logits(batch, params)
    tokens = sample(batch, transformed, params.greedy, torch.Generator().manual_seed(123))
    for a in range(3):
        expected = transformed[a * draws].softmax(-1) * draws
        observed = torch.bincount(tokens[a * draws:(a + 1) * draws], minlength=6).float()
        support = expected > 0
        assert observed[~support].sum() == 0, "sampled a token the transform removed"
        chi2 = (((observed - expected) ** 2) / expected)[support].sum().item()
        dof = int(support.sum()) - 1
        assert chi2 < dof + 5 * math.sqrt(2 * dof) + 10, (actions[a].name, chi2)


def test_per_row_generators_make_rows_independent_of_the_batch():
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(2))
    aset = ActionSet([DecodingAction(temperature=1.0)])
    params = aset.params(torch.zeros(4, dtype=torch.long))
    t = transform_logits(logits, params)
    full = sample(logits, t, params.greedy, [torch.Generator().manual_seed(s) for s in range(4)])
    sub = aset.params(torch.zeros(2, dtype=torch.long))
    part = sample(logits[2:], t[2:], sub.greedy, [torch.Generator().manual_seed(s) for s in (2, 3)])
    assert torch.equal(full[2:], part)


def test_token_logprobs_under_the_transformed_distribution():
    logits = torch.tensor([[0.0, 0.0, -float("inf")]])
    assert token_logprobs(logits, torch.tensor([0])).item() == pytest.approx(math.log(0.5))


def _splitmix_reference(seed: int, step: int, stream: int) -> float:
    """counter_uniform in plain Python integers (unsigned 64-bit arithmetic)."""
    mask = (1 << 64) - 1

    def mix(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)

    key = mix((seed + stream * 0x9E3779B97F4A7C15) & mask)
    return (mix((key + (step + 1) * 0x9E3779B97F4A7C15) & mask) >> 11) / 2.0 ** 53


def test_counter_uniform_is_splitmix64_of_seed_step_and_stream():
    seeds = [0, 1, 2**62 + 12345, 7_345_918_273_645_123]
    for step, stream in ((0, 0), (5, 0), (5, 1), (1000, 1)):
        got = counter_uniform(torch.tensor(seeds), step, stream).tolist()
        assert got == [_splitmix_reference(s, step, stream) for s in seeds], (step, stream)


def test_counter_uniform_is_uniform_and_streams_differ():
    seeds = torch.arange(20000)
    u = counter_uniform(seeds, 3)
    assert ((u >= 0) & (u < 1)).all()
    observed = torch.histc(u.float(), bins=20, min=0, max=1)
    chi2 = ((observed - 1000) ** 2 / 1000).sum().item()
    assert chi2 < 19 + 5 * math.sqrt(38) + 10
    assert (not torch.equal(u, counter_uniform(seeds, 4))
            and not torch.equal(u, counter_uniform(seeds, 3, ACTION_STREAM)))
    u32 = counter_uniform(seeds, 3, dtype=torch.float32)
    assert u32.dtype == torch.float32 and (u32 < 1).all()
    # one row's draws do not depend on which rows share its batch
    assert torch.equal(counter_uniform(seeds[5:9], 3), u[5:9])


def test_inverse_cdf_sampling_over_several_blocks_matches_the_weights():
    """A 1,000-token vocabulary split into blocks of 64 (not a multiple): chi-square on grouped
    frequencies, and zero-weight tokens (including whole blocks and block edges) never drawn."""
    gen = torch.Generator().manual_seed(4)
    weights = torch.rand(1000, generator=gen) ** 3
    weights[64:128] = 0  # a whole empty block
    weights[[0, 63, 511, 999]] = 0  # block edges and the last token
    draws = 50000
    tokens = inverse_cdf_sample(weights.expand(draws, -1), torch.rand(draws, generator=gen, dtype=torch.float64),
                                block=64)
    assert weights[tokens].gt(0).all()
    observed = torch.bincount(tokens, minlength=1000).float().view(50, 20).sum(1)  # 50 groups of 20 tokens
    expected = (weights / weights.sum() * draws).view(50, 20).sum(1)
    support = expected > 0
    chi2 = (((observed - expected) ** 2) / expected)[support].sum().item()
    dof = int(support.sum()) - 1
    assert chi2 < dof + 5 * math.sqrt(2 * dof) + 10


def test_inverse_cdf_sampling_at_the_extremes_of_the_uniform():
    weights = torch.tensor([[0.0, 1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 2.0, 0.0]])
    tokens = inverse_cdf_sample(weights, torch.tensor([0.0, 1.0 - 2.0 ** -53]), block=2)
    assert tokens.tolist() == [1, 3]
