"""``Adapter`` and its transformers integration on the tiny random Llama (no downloads)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from conftest import make_tiny_lm
from decoding_adapters import Adapter
from decoding_adapters.decoding.actions import ActionSet, DecodingAction, transform_logits
from decoding_adapters.decoding.loop import decode
from decoding_adapters.policies.networks import (
    AdapterConfig,
    SequencePolicy,
    SequencePolicyConfig,
    TokenPolicy,
    TokenPolicyConfig,
    save_adapter,
)

ACTIONS = [
    DecodingAction(do_sample=False, temperature=0.0),
    DecodingAction(temperature=1.3, top_k=5),
    DecodingAction(temperature=0.7, top_p=0.9, min_p=0.05),
]


def _forced(policy: torch.nn.Module, head: torch.nn.Linear, action: int | None) -> None:
    """Make the policy always pick ``action`` (zero weights, a large bias); None keeps it random."""
    if action is None:
        return
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-20.0)
        head.bias[action] = 20.0


def save_token_adapter(directory, lm, action=None, features="hidden", seed=0):
    torch.manual_seed(seed)
    policy = TokenPolicy(
        TokenPolicyConfig(
            hidden_size=lm.hidden_size,
            num_actions=len(ACTIONS),
            features=features,
            token_budget=16,
            width=16,
            dropout=0.0,
        )
    )
    _forced(policy, policy.mlp[-1], action)
    config = AdapterConfig(
        kind="token",
        policy=dataclasses.asdict(policy.config),
        actions=[a.to_dict() for a in ACTIONS],
        base_model="tiny",
        base_fingerprint=lm.fingerprint(),
        token_budget=16,
        task="arithmetic",
    )
    save_adapter(directory, policy, config)
    return directory


def save_sequence_adapter(directory, lm, action=None):
    torch.manual_seed(0)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=lm.hidden_size, num_actions=len(ACTIONS), hidden=16))
    _forced(policy, policy.head[-1], action)
    config = AdapterConfig(
        kind="sequence",
        policy=dataclasses.asdict(policy.config),
        actions=[a.to_dict() for a in ACTIONS],
        base_model="tiny",
        base_fingerprint=lm.fingerprint(),
        parallel_budgets=[1, 2, 4],
    )
    save_adapter(directory, policy, config)
    return directory


def _no_hooks(model) -> bool:
    return all(not m._forward_hooks for m in model.modules())


def _inputs(lm, prompts):
    ids, mask = lm.pad(prompts)
    return {"input_ids": ids, "attention_mask": mask}


# ---- loading ---------------------------------------------------------------------------------------


def test_from_pretrained_checks_the_lm(tmp_path, tiny_lm):
    d = save_token_adapter(tmp_path / "tok", tiny_lm)
    adapter = Adapter.from_pretrained(d, lm=tiny_lm)
    assert adapter.kind == "token" and adapter.action_names == [a.name for a in ACTIONS]
    other = make_tiny_lm(hidden_size=48)
    with pytest.raises(ValueError, match="hidden"):
        Adapter.from_pretrained(d, lm=other)
    with pytest.raises(ValueError, match="hidden_size"):
        adapter.logits_processor(other.model)
    with pytest.raises(ValueError, match="sequence adapter"):
        adapter.generation_config(["hi"])
    [g] = adapter.generator().generate("What is 2+3?", token_budget=4)  # the project's own loop, same handle
    assert g.kind == "token" and len(g.token_actions[0]) == g.completion_tokens[0]


def test_sequence_adapter_needs_an_lm_and_returns_one_config_per_prompt(tmp_path, tiny_lm):
    d = save_sequence_adapter(tmp_path / "seq", tiny_lm, action=1)
    with pytest.raises(ValueError, match="prompt embedding"):
        Adapter.from_pretrained(d).generation_config(["hi"], n=4)
    adapter = Adapter.from_pretrained(d, lm=tiny_lm)
    with pytest.raises(ValueError, match="token adapter"):
        adapter.logits_processor(tiny_lm.model)
    configs = adapter.generation_config(
        ["What is 2+3?", "Hi", [{"role": "user", "content": "x"}]], n=4, max_new_tokens=8
    )
    assert len(configs) == 3
    for c in configs:
        assert (c.do_sample, c.temperature, c.top_k, c.top_p, c.num_return_sequences) == (True, 1.3, 5, 1.0, 4)
    # greedy: one sequence (HF rejects greedy with num_return_sequences > 1), usable by generate as is
    greedy = Adapter.from_pretrained(save_sequence_adapter(tmp_path / "g", tiny_lm, action=0), lm=tiny_lm)
    [c] = greedy.generation_config("Hi", n=4, max_new_tokens=6)
    assert (c.do_sample, c.num_return_sequences) == (False, 1)
    [p] = tiny_lm.encode_chat([[{"role": "user", "content": "Hi"}]])
    out = tiny_lm.model.generate(**_inputs(tiny_lm, [p]), generation_config=c)
    ref = tiny_lm.model.generate(**_inputs(tiny_lm, [p]), do_sample=False, max_new_tokens=6)
    assert torch.equal(out, ref)


def test_sampling_params_dicts_follow_the_chosen_action(tmp_path, tiny_lm):
    adapter = Adapter.from_pretrained(save_sequence_adapter(tmp_path / "seq", tiny_lm, action=2), lm=tiny_lm)
    dicts = adapter.sampling_params_dicts(["a", "b"], n=4, max_tokens=32, seed=7, stop_token_ids=[1])
    assert [d["n"] for d in dicts] == [4, 4]
    assert (
        dicts[0]["temperature"] == 0.7
        and dicts[0]["top_p"] == 0.9
        and dicts[0]["min_p"] == 0.05
        and dicts[0]["top_k"] == -1
    )
    assert dicts[0]["seed"] != dicts[1]["seed"] and dicts[0]["stop_token_ids"] == [1] and dicts[0]["max_tokens"] == 32
    greedy = Adapter.from_pretrained(save_sequence_adapter(tmp_path / "g", tiny_lm, action=0), lm=tiny_lm)
    [d] = greedy.sampling_params_dicts("a", n=4)
    assert (d["temperature"], d["n"]) == (0.0, 1)  # vLLM >= 0.33 rejects greedy with n > 1
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="sampling_params_dicts"):
            adapter.sampling_params(["a"], n=2)


# ---- transformers generate ---------------------------------------------------------------------------


def test_greedy_adapter_gives_exactly_generate_greedy_and_leaves_no_hook(tmp_path, tiny_lm, tiny_prompts):
    adapter = Adapter.from_pretrained(save_token_adapter(tmp_path / "tok", tiny_lm, action=0))
    model, inputs = tiny_lm.model, _inputs(tiny_lm, tiny_prompts)
    ref = model.generate(**inputs, do_sample=False, max_new_tokens=12)
    assert _no_hooks(model)
    with adapter.logits_processor(model, token_budget=12) as lp:
        assert not _no_hooks(model)
        torch.manual_seed(0)
        out = model.generate(**inputs, max_new_tokens=12, **lp.generate_kwargs())
    assert _no_hooks(model)
    assert torch.equal(out, ref)
    assert lp.action_matrix.shape == (len(tiny_prompts), 12) and bool((lp.action_matrix == 0).all())
    with pytest.raises(RuntimeError, match="inside"):
        lp(out, torch.zeros(len(tiny_prompts), tiny_lm.vocab_size))
    # an error inside the block still removes the hook
    with pytest.raises(KeyError):
        with adapter.logits_processor(model):
            raise KeyError("boom")
    assert _no_hooks(model)


def _chi2_ok(observed: torch.Tensor, probs: torch.Tensor, draws: int) -> tuple[bool, float]:
    expected = probs * draws
    support = expected > 0
    if observed[~support].sum() > 0:
        return False, math.inf
    chi2 = (((observed - expected) ** 2) / expected)[support].sum().item()
    dof = max(int(support.sum()) - 1, 1)
    return chi2 < dof + 5 * math.sqrt(2 * dof) + 10, chi2


def test_sampling_adapter_matches_our_loops_token_distribution(tmp_path, tiny_lm, tiny_prompts):
    """First generated token of one prompt, many rows: generate + processor vs our decode loop, both
    chi-square-tested against the transformed distribution of that action."""
    adapter = Adapter.from_pretrained(save_token_adapter(tmp_path / "tok", tiny_lm, action=1))
    prompt, draws = tiny_prompts[0], 3000
    ids, mask = tiny_lm.pad([prompt])
    with torch.no_grad():
        _, logits, _ = tiny_lm.forward(ids, mask, (mask.cumsum(-1) - 1))
    aset = ActionSet(ACTIONS)
    probs = transform_logits(logits.cpu(), aset.params(torch.tensor([1]))).softmax(-1)[0]
    assert int((probs > 0).sum()) >= 3  # a test that can fail: several tokens in the support

    model = tiny_lm.model
    defaults = model.generation_config
    saved = (defaults.top_k, defaults.top_p, defaults.temperature)
    defaults.top_k, defaults.top_p, defaults.temperature = 1, 0.5, 0.3  # model defaults must not leak in after ours
    try:
        with adapter.logits_processor(model, token_budget=1) as lp:
            torch.manual_seed(0)
            out = model.generate(
                input_ids=ids.expand(draws, -1),
                attention_mask=mask.expand(draws, -1),
                max_new_tokens=1,
                **lp.generate_kwargs(),
            )
    finally:
        defaults.top_k, defaults.top_p, defaults.temperature = saved
    hf_tokens = out[:, -1]
    ours = decode(tiny_lm, [prompt], aset, prompt_of_row=[0] * draws, row_actions=1, token_budget=1, seed=0).tokens[
        :, 0
    ]
    for name, tokens in (("generate", hf_tokens), ("ours", ours)):
        ok, chi2 = _chi2_ok(torch.bincount(tokens.cpu(), minlength=probs.numel()).float(), probs, draws)
        assert ok, (name, chi2)
    # and a wrong distribution is rejected by the same test (T=0.7 + top-p/min-p)
    wrong = transform_logits(logits.cpu(), aset.params(torch.tensor([2]))).softmax(-1)[0]
    assert not _chi2_ok(torch.bincount(hf_tokens.cpu(), minlength=probs.numel()).float(), wrong, draws)[0]


def test_random_token_adapter_picks_the_same_actions_as_our_loop(tmp_path, tiny_lm, tiny_prompts):
    """A real (unforced) adapter over greedy-only actions: per-step actions equal our loop's chooser."""
    from decoding_adapters.policies.networks import TokenPolicyChooser

    adapter = Adapter.from_pretrained(save_token_adapter(tmp_path / "tok", tiny_lm, action=None, seed=3))
    adapter.actions = [ACTIONS[0]] * len(ACTIONS)  # every action greedy: tokens agree, actions are compared
    with torch.no_grad():
        adapter.policy.mlp[-1].weight.mul_(50)  # sharper preferences, so that the argmax moves between steps
    model, inputs = tiny_lm.model, _inputs(tiny_lm, tiny_prompts)
    with adapter.logits_processor(model, token_budget=6, deterministic=True) as lp:  # argmax, like the chooser below
        model.generate(**_inputs(tiny_lm, tiny_prompts[:1]), max_new_tokens=3, **lp.generate_kwargs())
        out = model.generate(**inputs, max_new_tokens=6, **lp.generate_kwargs())  # a second call starts afresh
    ours = decode(
        tiny_lm,
        tiny_prompts,
        ActionSet(adapter.actions),
        chooser=TokenPolicyChooser(adapter.policy, deterministic=True),
        token_budget=6,
    )
    valid = ours.valid_mask()  # generate pads a row after its EOS; our loop stops it
    assert torch.equal(out[:, -6:].cpu()[valid], ours.tokens[valid])
    assert torch.equal(lp.action_matrix[:, : valid.shape[1]].cpu()[valid], ours.actions[valid])
    assert len(set(ours.actions.flatten().tolist())) > 1  # the adapter really switches actions
