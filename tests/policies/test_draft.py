"""The draft-gated adapter's library pieces on the tiny random LM: the draft's summary, the context,
``draft_gated_decode``'s compute accounting (a kept draft costs one decode, a re-decode two at B = 1
and B at B > 1), the standardised sequence policy, and an adapter of kind 'draft' saved and loaded."""

from dataclasses import asdict

import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import decode
from decoding_adapters.policies.draft import (
    CONFIDENCE_FEATURES,
    KEEP_DRAFT,
    DraftContextConfig,
    draft_context,
    draft_gated_decode,
    expected_decodes,
    summarise_draft,
)
from decoding_adapters.policies.networks import (
    AdapterConfig,
    SequencePolicy,
    SequencePolicyConfig,
    load_adapter,
    save_adapter,
)

SAMPLER = DecodingAction(temperature=1.0)


def test_summary_matches_the_draft(tiny_lm, tiny_prompts):
    result = decode(tiny_lm, tiny_prompts, ActionSet([GREEDY]), row_actions=0, token_budget=6, record_features=True)
    summary = summarise_draft(result)
    n, h = len(tiny_prompts), tiny_lm.hidden_size
    assert summary.confidence.shape == (n, len(CONFIDENCE_FEATURES))
    assert summary.mean_hidden.shape == summary.last_hidden.shape == (n, h)
    for i in range(n):
        length = int(result.lengths[i])
        assert summary.confidence[i, 0] == pytest.approx(float(result.entropy[i, :length].mean()), rel=1e-5)
        assert summary.confidence[i, 3] == pytest.approx(float(result.max_prob[i, :length].min()), rel=1e-5)
        assert summary.confidence[i, 4] == pytest.approx(length / 6)
        assert torch.allclose(summary.last_hidden[i], result.features[i, length - 1])
    with pytest.raises(ValueError, match="record_features"):
        summarise_draft(decode(tiny_lm, tiny_prompts, ActionSet([GREEDY]), row_actions=0, token_budget=2))


def test_context_widths(tiny_lm, tiny_prompts):
    result = decode(tiny_lm, tiny_prompts, ActionSet([GREEDY]), row_actions=0, token_budget=3, record_features=True)
    summary = summarise_draft(result)
    h = tiny_lm.hidden_size
    for features, width in (("confidence", 6), ("mean", 6 + h), ("hidden", 6 + 2 * h)):
        config = DraftContextConfig(features=features, token_budget=3)
        assert draft_context(summary, config).shape == (len(tiny_prompts), width) and config.dim(h) == width
    with pytest.raises(ValueError, match="prompt embeddings"):
        draft_context(summary, DraftContextConfig(features="prompt"))
    with pytest.raises(ValueError, match="draft features"):
        DraftContextConfig(features="tokens")


@pytest.mark.parametrize("budget", [1, 3])
def test_kept_draft_costs_one_decode_and_a_redecode_costs_the_rest(tiny_lm, tiny_prompts, budget):
    context = DraftContextConfig(features="confidence", token_budget=5)
    choices = torch.tensor([KEEP_DRAFT, 1, KEEP_DRAFT, 1])
    result = draft_gated_decode(tiny_lm, tiny_prompts, None, context, [SAMPLER], budget,
                                choose=lambda summary, budgets: choices, stop_at_answer=False)
    draft = decode(tiny_lm, tiny_prompts, ActionSet([GREEDY]), row_actions=0, token_budget=5)
    assert result.kept == [True, False, True, False]
    for p in range(4):
        if p in (0, 2):
            assert result.decodes[p] == 1 and result.texts[p] == [draft.texts[p]]
            assert result.tokens[p] == int(draft.lengths[p])
        else:
            assert result.decodes[p] == (2 if budget == 1 else budget)
            assert len(result.texts[p]) == (1 if budget == 1 else budget)
            if budget > 1:
                assert result.texts[p][0] == draft.texts[p]  # the draft is one of the B answers
            rows = [r for r, q in enumerate(result.redecode_prompt) if q == p]
            assert result.tokens[p] == int(draft.lengths[p]) + sum(int(result.redecoded.lengths[r]) for r in rows)
    assert expected_decodes(0.5, 1) == 1.5 and expected_decodes(0.0, 4) == 4


def test_policy_with_a_prior_on_keep_keeps_every_draft(tiny_lm, tiny_prompts):
    context = DraftContextConfig(features="mean", token_budget=4)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=context.dim(tiny_lm.hidden_size), num_actions=2,
                                                 prior=(0.9, 0.1), input_norm="standardise")).eval()
    result = draft_gated_decode(tiny_lm, tiny_prompts, policy, context, [SAMPLER], 1, stop_at_answer=False)
    assert result.kept == [True] * 4 and result.redecoded is None and result.decodes == [1] * 4
    assert result.probs.shape == (4, 2) and torch.allclose(result.probs[:, 0], torch.full((4,), 0.9))


def test_standardised_policy_uses_its_statistics():
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=3, num_actions=2, input_norm="standardise"))
    contexts = torch.tensor([[1.0, 10.0, 5.0], [3.0, 30.0, 5.0]])
    policy.set_standardisation(contexts)
    normalised = policy.normalise(contexts)
    assert torch.allclose(normalised[:, :2], torch.tensor([[-1.0, -1.0], [1.0, 1.0]]))
    assert torch.all(normalised[:, 2] == 0)  # a constant feature keeps std 1
    with pytest.raises(ValueError, match="input_norm"):
        SequencePolicy(SequencePolicyConfig(embed_dim=3, num_actions=2)).set_standardisation(contexts)


def test_draft_adapter_round_trip(tmp_path, tiny_lm):
    context = DraftContextConfig(features="confidence", token_budget=4)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=6, num_actions=2, input_norm="standardise"))
    policy.set_standardisation(torch.randn(10, 6))
    config = AdapterConfig(kind="draft", policy=asdict(policy.config), actions=[SAMPLER.to_dict()],
                           base_model="tiny", base_fingerprint=tiny_lm.fingerprint(), draft=asdict(context))
    save_adapter(tmp_path, policy, config)
    loaded, loaded_config = load_adapter(tmp_path, tiny_lm)
    assert loaded_config.kind == "draft" and loaded_config.policy_mode == "argmax"
    assert torch.equal(loaded.context_mean, policy.context_mean) and torch.equal(loaded.context_std, policy.context_std)
    assert (tmp_path / "README.md").is_file()
    with pytest.raises(ValueError, match="outputs"):  # output 0 keeps the draft: K actions need K + 1 outputs
        AdapterConfig(kind="draft", policy=asdict(policy.config), actions=[SAMPLER.to_dict()] * 2, base_model="t",
                      base_fingerprint={}, draft=asdict(context))
    with pytest.raises(ValueError, match="draft"):
        AdapterConfig(kind="draft", policy=asdict(policy.config), actions=[SAMPLER.to_dict()], base_model="t",
                      base_fingerprint={})


def test_a_stopped_draft_and_its_redecodes_end_at_the_first_answer(tiny_lm, tiny_prompts):
    """With the stop, each draft and each re-decode ends where its answer check first holds (here:
    after the first token), the summary reads the stopped draft (its length, and "ended on its own"
    = 1); without it the checks are not asked; a stop without the checks is refused."""
    choices = torch.tensor([KEEP_DRAFT, 1, KEEP_DRAFT, 1])
    checks = [lambda text: True] * len(tiny_prompts)
    context = DraftContextConfig(features="confidence", token_budget=5)
    for stop in (False, True):
        seen = {}

        def choose(summary, budgets, seen=seen):
            seen["summary"] = summary
            return choices

        result = draft_gated_decode(tiny_lm, tiny_prompts, None, context, [SAMPLER], 1, choose=choose,
                                    answer_complete=checks, stop_at_answer=stop)
        lengths = result.redecoded.lengths.tolist()
        if not stop:  # unstopped, the tiny LM's rows run to the budget
            assert result.draft.stopped_by_check is None and lengths == [5, 5]
            continue
        assert result.draft.lengths.tolist() == [1] * 4 and bool(result.draft.stopped_by_check.all())
        assert seen["summary"].confidence[:, 4].tolist() == [pytest.approx(1 / 5)] * 4
        assert seen["summary"].confidence[:, 5].tolist() == [1.0] * 4  # ended on its own
        assert lengths == [1, 1] and result.tokens == [1, 2, 1, 2]
    with pytest.raises(ValueError, match="answer_complete"):
        draft_gated_decode(tiny_lm, tiny_prompts, None, context, [SAMPLER], 1, choose=lambda s, b: choices,
                           stop_at_answer=True)
