"""A token policy that always picks greedy scores exactly Greedy's rows, though its rows are decoded
in other batches than Greedy's (the evaluation decodes each method's rows in its own requests, split
into ``batch_rows`` chunks, beside other methods' sampled rows)."""

import copy
import random

import pytest
import torch

from conftest import make_tiny_lm
from decoding_adapters.decoding.actions import PRESETS, DecodingAction
from decoding_adapters.evaluation import EvalConfig, Method, evaluate, greedy_method, static_method
from decoding_adapters.lm.models import FrozenLM, ModelSpec
from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyConfig
from helpers import HasOneTask


class HasOneLengths(HasOneTask):
    """Problems of many prompt lengths; a completion is correct when it contains the digit 1."""

    name = "has-one-lengths"
    questions = tuple("".join(random.Random(0).choice("0123456789+*= ab") for _ in range(n))
                      for n in range(2, 90, 4))


def always_greedy_method(lm) -> Method:
    """A token adapter in argmax mode whose prior puts all but 1e-9 of its mass on greedy."""
    torch.manual_seed(0)
    actions = list(PRESETS["math-token"])
    prior = (1 - 3e-9, 1e-9, 1e-9, 1e-9)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=24, prior=prior))
    return Method("Token always greedy", "token", actions, role="w/ budget", level="token", policy=policy,
                  policy_mode="argmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_an_always_greedy_token_policy_scores_exactly_greedys_rows(dtype):
    tiny = make_tiny_lm(seed=1, hidden_size=64)
    model = copy.deepcopy(tiny.model)
    with torch.no_grad():  # smaller logits than the fixture's: near-ties, where rounding can pick another token
        model.lm_head.weight.div_(4)
    lm = FrozenLM(model.to(dtype), tiny.tokenizer, ModelSpec("tiny"))
    task = HasOneLengths()
    problems = task.load("test")
    methods = [greedy_method(), static_method(DecodingAction(True, 1.25)), always_greedy_method(lm)]
    cfg = EvalConfig(k_values=(1, 2), seeds=1, token_budget=24, keep_trajectories=64)
    ev = evaluate(lm, task, problems, methods, cfg, batch_rows=5)
    rows = {name: {t["problem_id"]: t["token_ids"] for t in ev.details["trajectories"][name]}
            for name in ("Greedy", "Token always greedy")}
    assert len(rows["Greedy"]) == len(problems)
    assert rows["Token always greedy"] == rows["Greedy"]
    per_problem = ev.details["per_problem"]
    assert per_problem["Token always greedy"]["pass@1"] == per_problem["Greedy"]["pass@1"]
