"""The entropy-only adapter inside a running vLLM engine (``EntropyAdapterLogitsProcessor``, loaded by
the package's entry point): in a batch that mixes adapter and plain requests, each decision is the
one ``TokenPolicyChooser`` makes on the same logits and budget, the engine's budget bookkeeping is
one decision per generated token, every sampled token is allowed by its step's action, and the
decisions follow the project's own loop while the two share a prefix."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import StepFeatures, base_entropy, row_seed
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
from decoding_adapters.policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyChooser,
    TokenPolicyConfig,
    save_adapter,
)
from decoding_adapters.serving.integrations.rows import ActionTable
from decoding_adapters.serving.integrations.vllm_processor import EXTRA_ARGS_KEY, EntropyAdapterLogitsProcessor
from vllm_lane.lane_helpers import model_runner, report

pytestmark = pytest.mark.vllm

ACTIONS = list(PRESETS["math-token"])  # greedy, T = 0.5, 1.0, 1.25
BUDGET, PROMPTS = 24, 6


def _policy() -> TokenPolicy:
    torch.manual_seed(0)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=16, num_actions=len(ACTIONS), features="entropy",
                                           use_budget=True, token_budget=BUDGET, width=16, dropout=0.0))
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(4)  # sharp preferences that move with the entropy and the budget
    return policy.eval()


def _processor(engine) -> EntropyAdapterLogitsProcessor:
    runner = model_runner(engine)
    found = [p for p in runner.input_batch.logitsprocs.all if isinstance(p, EntropyAdapterLogitsProcessor)]
    assert found, "the engine did not load the entry-point processor: is the package installed in this venv?"
    return found[0]


def test_entropy_adapter_decisions_inside_the_engine(engine, vllm_module, frozen_lm, arithmetic, tmp_path, capsys):
    policy = _policy()
    config = AdapterConfig(kind="token", policy=dataclasses.asdict(policy.config),
                           actions=[a.to_dict() for a in ACTIONS], base_model="smollm2", base_fingerprint={},
                           token_budget=BUDGET)
    path = str(save_adapter(tmp_path / "entropy", policy, config))
    prompts, _ = encode_problems(frozen_lm, arithmetic, arithmetic.load("validation")[:PROMPTS])
    sp = vllm_module.SamplingParams
    requests = [sp(max_tokens=BUDGET, seed=i, temperature=1.0,
                   extra_args={EXTRA_ARGS_KEY: {"path": path, "deterministic": i % 2 == 0, "seed": 100 + i}})
                for i in range(PROMPTS)]
    requests += [sp(max_tokens=BUDGET, temperature=0.0), sp(max_tokens=BUDGET, temperature=0.7, seed=1)]  # plain
    inputs = [{"prompt_token_ids": p} for p in prompts] + [{"prompt_token_ids": prompts[0]}] * 2
    processor = _processor(engine)
    processor.trace = []
    try:
        outputs = engine.generate(inputs, requests, use_tqdm=False)
    finally:
        trace, processor.trace = processor.trace, None
    tokens = [list(o.outputs[0].token_ids) for o in outputs]

    # 1. Each decision is TokenPolicyChooser's on the same logits and remaining budget.
    decisions, same = 0, 0
    steps: dict[int, dict[int, int]] = {}  # request seed -> {t: action}
    table = ActionTable(ACTIONS, "cpu")
    for entry in trace:
        logits, remaining = entry["logits"], entry["remaining"]
        entropy, max_prob = base_entropy(logits)
        uniform = entry["uniform"] if entry["uniform"] is not None else torch.full((len(logits),), float("nan"))
        features = StepFeatures(torch.zeros(len(logits), 16), entropy, max_prob, 0, remaining,
                                torch.arange(len(logits)), uniform)
        sampled = TokenPolicyChooser(policy)(StepFeatures(**{**features.__dict__, "uniform": uniform.nan_to_num(0.5)}))
        argmax = TokenPolicyChooser(policy, deterministic=True)(features)
        expected = torch.where(torch.tensor(entry["deterministic"]), argmax, sampled)
        decisions += len(expected)
        same += int((expected == entry["action"]).sum())
        for row, (seed, t, action) in enumerate(zip(entry["seeds"], entry["generated"], entry["action"].tolist())):
            assert remaining[row] == BUDGET - t
            steps.setdefault(seed, {})[t] = action
            # 3. the token vLLM sampled at this step is one the chosen action allows
            token = tokens[seed - 100][t]
            allowed = table.transform(logits[row:row + 1], torch.tensor([action]))[0]
            assert torch.isfinite(allowed[token]), (seed, t, action)
    report(capsys, f"entropy adapter in the engine: {same}/{decisions} decisions equal TokenPolicyChooser's")
    assert decisions > 0 and same == decisions
    # 2. One decision per generated token, t = 0, 1, 2, ... for each adapter request, none for plain ones.
    assert sorted(steps) == [100 + i for i in range(PROMPTS)]
    for seed, by_step in steps.items():
        assert sorted(by_step) == list(range(len(tokens[seed - 100]))), seed
    assert len({a for s in steps.values() for a in s.values()}) > 1  # several actions taken: a test that can fail

    # 4. Against the project's loop with the same adapter (deterministic requests): the same actions
    # while both have generated the same tokens (a sampled action's token then parts them).
    request = RolloutRequest(prompts, list(range(PROMPTS)), [row_seed(0, i) for i in range(PROMPTS)], BUDGET)
    chooser = TokenPolicyChooser(policy, deterministic=True)
    ours = HFRollouts(frozen_lm, ActionSet(ACTIONS)).run(request, chooser=chooser)
    compared = agreed = 0
    for i in range(0, PROMPTS, 2):
        loop_tokens = ours.tokens[i, : ours.lengths[i]].tolist()
        for t, action in sorted(steps[100 + i].items()):
            compared += 1
            agreed += int(action == int(ours.actions[i, t]))
            if t >= len(loop_tokens) or loop_tokens[t] != tokens[i][t]:
                break
    report(capsys, f"entropy adapter, engine vs loop on shared prefixes: {agreed}/{compared} actions equal")
    assert agreed >= 0.95 * compared
