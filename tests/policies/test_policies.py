"""Policies: shapes, budget inputs, chooser reproducibility, save/load round trip and mismatch errors."""

import json

import pytest
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.policies.networks import (
    AdapterConfig,
    SequencePolicy,
    SequencePolicyConfig,
    TokenPolicy,
    TokenPolicyChooser,
    TokenPolicyConfig,
    categorical_from_uniform,
    load_adapter,
    save_adapter,
)


def test_sequence_policy_uses_the_budget_only_when_asked():
    torch.manual_seed(0)
    with_b = SequencePolicy(SequencePolicyConfig(embed_dim=8, num_actions=3))
    e = torch.randn(4, 8)
    a = with_b(e, torch.tensor([1, 1, 1, 1]))
    b = with_b(e, torch.tensor([8, 8, 8, 8]))
    assert a.shape == (4, 3) and not torch.allclose(a, b)
    with pytest.raises(ValueError, match="budget"):
        with_b(e)
    without = SequencePolicy(SequencePolicyConfig(embed_dim=8, num_actions=3, use_budget=False))
    assert torch.equal(without(e, torch.ones(4)), without(e, torch.full((4,), 8)))
    action, probs = with_b.select(e, torch.ones(4), deterministic=True)
    assert torch.equal(action, probs.argmax(-1)) and torch.allclose(probs.sum(-1), torch.ones(4))


def test_categorical_from_uniform_inverts_the_cdf():
    probs = torch.tensor([[0.2, 0.5, 0.3]] * 4)
    u = torch.tensor([0.0, 0.19, 0.69, 0.999])
    assert categorical_from_uniform(probs, u).tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("features,use_budget", [("hidden", True), ("hidden", False), ("entropy", True)])
def test_token_policy_as_chooser_is_reproducible(tiny_lm, tiny_prompts, features, use_budget):
    torch.manual_seed(0)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=tiny_lm.hidden_size, num_actions=4, features=features,
                                           use_budget=use_budget, token_budget=8)).eval()
    aset = ActionSet(PRESETS["math-token"])

    def run():
        return decode(tiny_lm, tiny_prompts, aset, chooser=TokenPolicyChooser(policy), token_budget=8, seed=3)

    a, b = run(), run()
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.actions, b.actions)
    assert len(set(a.actions[a.valid_mask()].tolist())) > 1  # a fresh policy explores several actions


def test_adapter_round_trip_and_mismatch(tmp_path, tiny_lm):
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=tiny_lm.hidden_size, num_actions=4))
    cfg = AdapterConfig(kind="token", policy=policy.config.__dict__, actions=ActionSet(PRESETS["math-token"]).to_json(),
                        base_model="tiny", base_fingerprint=tiny_lm.fingerprint())
    save_adapter(tmp_path, policy, cfg)
    loaded, loaded_cfg = load_adapter(tmp_path, tiny_lm)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k])
    assert loaded_cfg.action_list == list(PRESETS["math-token"])
    cfg.base_fingerprint = {**cfg.base_fingerprint, "hidden_size": 999}
    save_adapter(tmp_path, policy, cfg)
    with pytest.raises(ValueError, match="hidden_size"):
        load_adapter(tmp_path, tiny_lm)
    with pytest.raises(FileNotFoundError):
        load_adapter(tmp_path / "nope")


def test_adapter_json_with_fields_it_does_not_know_is_refused(tmp_path, tiny_lm):
    """adapter.json must hold exactly the known fields: an unknown one (top level or in ``policy``)
    is a ValueError naming it, not silently dropped."""
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=tiny_lm.hidden_size, num_actions=4, token_budget=24))
    cfg = AdapterConfig(kind="token", policy=policy.config.__dict__, actions=ActionSet(PRESETS["math-token"]).to_json(),
                        base_model="tiny", base_fingerprint=tiny_lm.fingerprint(), token_budget=24)
    save_adapter(tmp_path, policy, cfg)
    data = json.loads((tmp_path / "adapter.json").read_text())
    assert load_adapter(tmp_path)[1].token_budget == 24
    (tmp_path / "adapter.json").write_text(json.dumps({**data, "budgets": [24]}))
    with pytest.raises(ValueError, match=r"unknown: \['budgets'\]"):
        load_adapter(tmp_path)
    with pytest.raises(ValueError, match="entropy_sees_budget"):
        AdapterConfig.from_dict({**data, "policy": {**data["policy"], "entropy_sees_budget": True}})


def test_entropy_only_ablation_observes_only_the_entropy():
    """The entropy-only ablation sees H_t alone, whatever use_budget says: phi(b_t) is not an input."""
    torch.manual_seed(0)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=8, num_actions=4, features="entropy", use_budget=True))
    assert policy.config.input_dim == 1
    h, e = torch.randn(5, 8), torch.rand(5)
    early = policy.observation(h, e, torch.full((5,), 30))
    late = policy.observation(h, e, torch.full((5,), 1))
    assert early.shape == (5, 1) and torch.equal(early, late) and torch.equal(early[:, 0], e)
    # the hidden-state adapter w/ budget still sees phi(b_t)
    hidden = TokenPolicy(TokenPolicyConfig(hidden_size=8, num_actions=4))
    assert not torch.equal(hidden.observation(h, e, torch.full((5,), 30)), hidden.observation(h, e, torch.ones(5)))


def test_entropy_only_adapter_round_trips_with_its_one_input(tmp_path):
    """Saved with use_budget=True, an entropy-only adapter still loads as a 1-input policy with the
    same weights."""
    shape = TokenPolicyConfig(hidden_size=8, num_actions=4, features="entropy", use_budget=True)
    policy = TokenPolicy(shape)
    actions = [a.to_dict() for a in PRESETS["math-token"]]
    save_adapter(tmp_path, policy, AdapterConfig("token", dict(shape.__dict__), actions, "m", {}))
    loaded, config = load_adapter(tmp_path)
    assert config.policy["use_budget"] is True and loaded.config.input_dim == 1
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in policy.state_dict().items())


def test_adapter_files_have_the_mode_of_any_new_file(tmp_path, tiny_lm):
    import stat

    from adapter_helpers import make_adapter

    make_adapter(tmp_path / "tok", tiny_lm, "token")
    plain = tmp_path / "plain.txt"
    plain.write_text("")  # what the umask gives a new file (0644 under the default 022)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "tok").iterdir()}
    assert set(modes) == {"adapter.safetensors", "adapter.json", "README.md"}
    assert set(modes.values()) == {stat.S_IMODE(plain.stat().st_mode)}, modes
