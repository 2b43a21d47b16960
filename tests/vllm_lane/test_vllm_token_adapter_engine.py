"""The full token adapter inside vLLM (``serving/integrations/vllm_model.py``): the registered model
class keeps the sampled rows' hidden states, the processor runs a hidden-state policy on them, and
with the loop's row seeds and budget every row takes the loop's actions (and tokens)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import row_seed
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
from decoding_adapters.policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyChooser,
    TokenPolicyConfig,
    save_adapter,
)
from decoding_adapters.serving.integrations.vllm_model import EXTRA_ARGS_KEY, TokenAdapterLogitsProcessor
from vllm_lane.lane_helpers import model_runner, report

pytestmark = pytest.mark.vllm

ACTIONS = list(PRESETS["math-token"])  # greedy, T = 0.5, 1.0, 1.25
BUDGET, PROMPTS = 24, 32


def _policy(hidden_size: int) -> TokenPolicy:
    torch.manual_seed(1)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=hidden_size, num_actions=len(ACTIONS), features="hidden",
                                           use_budget=True, token_budget=BUDGET, width=32, dropout=0.0))
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(3)  # a policy whose choice moves with the hidden state
    return policy.eval()


def test_token_adapter_actions_match_the_loop(engine, vllm_module, frozen_lm, arithmetic, tmp_path, capsys):
    policy = _policy(frozen_lm.hidden_size)
    config = AdapterConfig(kind="token", policy=dataclasses.asdict(policy.config),
                           actions=[a.to_dict() for a in ACTIONS], base_model="smollm2",
                           base_fingerprint=frozen_lm.fingerprint(), token_budget=BUDGET)
    path = str(save_adapter(tmp_path / "token", policy, config))
    prompts, _ = encode_problems(frozen_lm, arithmetic, arithmetic.load("validation")[:PROMPTS])
    seeds = [row_seed(0, i) for i in range(PROMPTS)]
    runner = model_runner(engine)
    processor = next(p for p in runner.input_batch.logitsprocs.all if isinstance(p, TokenAdapterLogitsProcessor))
    requests = [vllm_module.SamplingParams(max_tokens=BUDGET, temperature=1.0, seed=i,
                                           extra_args={EXTRA_ARGS_KEY: {"path": path, "seed": seeds[i]}})
                for i in range(PROMPTS)]
    processor.trace = []
    try:
        outputs = engine.generate([{"prompt_token_ids": p} for p in prompts], requests, use_tqdm=False)
    finally:
        trace, processor.trace = processor.trace, None
    engine_actions: dict[int, dict[int, int]] = {}
    for entry in trace:
        for seed, action in zip(entry["seeds"], entry["actions"]):
            engine_actions.setdefault(seed, {})[entry["t"]] = action

    request = RolloutRequest(prompts, list(range(PROMPTS)), seeds, BUDGET)
    ours = HFRollouts(frozen_lm, ActionSet(ACTIONS)).run(request, chooser=TokenPolicyChooser(policy))
    steps = same_actions = same_tokens = shared_steps = shared_same = identical_rows = 0
    for i, out in enumerate(outputs):
        length = int(ours.lengths[i])
        loop_actions, loop_tokens = ours.actions[i, :length].tolist(), ours.tokens[i, :length].tolist()
        vllm_tokens = list(out.outputs[0].token_ids)
        theirs = engine_actions[seeds[i]]
        assert sorted(theirs) == list(range(len(vllm_tokens)))  # one decision per generated token
        identical_rows += int(vllm_tokens == loop_tokens and [theirs[t] for t in range(length)] == loop_actions)
        diverged = False  # once a token differs the two rows continue from different states
        for t in range(length):
            steps += 1
            same_actions += int(theirs.get(t) == loop_actions[t])
            if not diverged:
                shared_steps += 1
                shared_same += int(theirs.get(t) == loop_actions[t])
            same_token = t < len(vllm_tokens) and vllm_tokens[t] == loop_tokens[t]
            same_tokens += int(same_token)
            diverged = diverged or not same_token
    taken = {a for row in engine_actions.values() for a in row.values()}
    report(capsys, f"token adapter in vLLM vs the loop, {PROMPTS} rows x {BUDGET} tokens (fp32): "
                   f"{same_actions}/{steps} steps with the same action ({same_actions / steps:.1%}), "
                   f"{same_tokens}/{steps} with the same token, {identical_rows}/{PROMPTS} rows identical; "
                   f"on shared prefixes {shared_same}/{shared_steps} actions equal; actions taken: {sorted(taken)}")
    assert len(taken) > 1  # the policy really switches: a test that can fail
    assert shared_same == shared_steps  # same state, same seed and step: the same decision
    assert same_actions >= 0.95 * steps
