"""What an evaluation decodes: the per-k Best row, deterministic rows decoded once, shared static
rows, the measured cost per method; and that decoding once changes no outcome."""

from __future__ import annotations

import copy

import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, PRESETS, DecodingAction
from decoding_adapters.decoding.rollouts import HFRollouts
from decoding_adapters.evaluation import (
    EvalConfig,
    Method,
    best_per_k_method,
    best_static_method,
    evaluate,
    greedy_method,
    load_best_per_k,
    mixed_method,
    select_best_action,
    static_method,
)
from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyConfig
from decoding_adapters.selection.best import best_static
from helpers import ContainsOne

SAMPLER = DecodingAction(True, 1.25)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class Counting:
    """Wraps a rollout engine and counts the rows it decodes, per call."""

    def __init__(self, inner, log):
        self.inner, self.log, self.action_set = inner, log, inner.action_set

    def run(self, request, chooser=None, **kwargs):
        self.log.append((chooser is not None, request.num_rows))
        return self.inner.run(request, chooser, **kwargs)

    def close(self):
        self.inner.close()


def run(lm, methods, cfg, log=None):
    log = [] if log is None else log
    task = ContainsOne()
    factory = lambda action_set, per_token: Counting(HFRollouts(lm, action_set, 16), log)  # noqa: E731
    return evaluate(lm, task, task.load("test"), methods, cfg, rollouts_factory=factory), log


def token_method(lm, name="Token", mode="argmax", force_greedy=False, seed=3):
    torch.manual_seed(seed)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=6))
    if force_greedy:  # the policy's argmax is greedy (action 0 of math-token) at every token
        with torch.no_grad():
            last = [m for m in policy.mlp if isinstance(m, torch.nn.Linear)][-1]
            last.weight.zero_()
            last.bias.copy_(torch.tensor([5.0, 0.0, 0.0, 0.0]))
    return Method(name, "token", list(PRESETS["math-token"]), role="w/ budget", level="token", policy=policy,
                  policy_mode=mode)


def same_outcomes(a, b, names):
    for name in names:
        assert a.results[name] == b.results[name], name
        assert a.details["per_problem"][name] == b.details["per_problem"][name], name
        assert a.details["lengths"][name] == b.details["lengths"][name], name
        assert a.details["action_usage"][name] == pytest.approx(b.details["action_usage"][name]), name


# ---- the Best row: one action per k ------------------------------------------------------------------


def test_best_per_k_takes_each_k_from_its_own_action(tiny_lm):
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=5, keep_trajectories=2)
    best = best_per_k_method({1: GREEDY, 2: SAMPLER, 4: SAMPLER})
    ev, _ = run(tiny_lm, [greedy_method(), static_method(SAMPLER, name="Sampler", role="sampler"), best], cfg)
    per = ev.details["per_problem"]
    assert per["Best"]["pass@1"] == per["Greedy"]["pass@1"]
    assert per["Best"]["pass@2"] == per["Sampler"]["pass@2"] and per["Best"]["pass@4"] == per["Sampler"]["pass@4"]
    assert ev.details["methods"]["Best"]["k_actions"] == {"1": "greedy", "2": SAMPLER.name, "4": SAMPLER.name}
    assert ev.details["methods"]["Best"]["kind"] == "static"
    # one action at every k is exactly the static row of that action
    same = best_per_k_method({1: SAMPLER, 2: SAMPLER, 4: SAMPLER}, name="Same")
    ev2, _ = run(tiny_lm, [static_method(SAMPLER), same], cfg)
    assert ev2.results["Same"] == ev2.results["Best"]
    assert ev2.details["lengths"]["Same"] == ev2.details["lengths"]["Best"]
    with pytest.raises(ValueError, match="no action for pass@4"):
        run(tiny_lm, [best_per_k_method({1: GREEDY, 2: SAMPLER})], cfg)
    with pytest.raises(ValueError):
        Method("x", "mixed", [GREEDY, SAMPLER], k_actions={1: GREEDY})


def test_best_static_method_and_load_best_per_k():
    best = best_static({1: [0.2, 0.5], 8: [0.9, 0.5]}, [SAMPLER.name, "greedy"], samples=4, problems=3)
    method = best_static_method(best, [SAMPLER, GREEDY])
    assert method.k_actions == {1: GREEDY, 8: SAMPLER} and method.actions == [GREEDY, SAMPLER]
    data = {"best_per_k": {**best.to_dict(), "actions": {a.name: a.to_dict() for a in (SAMPLER, GREEDY)}}}
    assert load_best_per_k(data) == {1: GREEDY, 8: SAMPLER}
    assert load_best_per_k({"best_single": GREEDY.to_dict()}) is None


def test_select_best_action_is_the_best_static_choice(tiny_lm):
    task = ContainsOne()
    cfg = EvalConfig(k_values=(1, 4), seeds=1, token_budget=5)
    best = select_best_action(tiny_lm, task, task.load("validation"), [SAMPLER, GREEDY], samples=4,
                              k_values=(1, 4), config=cfg)
    assert best.names == (SAMPLER.name, "greedy") and best.k_values == (1, 4) and best.samples == 4
    for k in (1, 4):
        scores = [best.score_for(k, n) for n in best.names]
        assert best.score_for(k) == max(scores) and best.name_for(k) == best.names[scores.index(max(scores))]
    assert best.score_for(1, "greedy") == best.score_for(4, "greedy")  # deterministic: pass@k flat in k


# ---- deterministic rows decoded once --------------------------------------------------------------------


def test_greedy_is_decoded_once_per_problem_and_equals_decoding_every_sample(tiny_lm):
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=3, token_budget=5, keep_trajectories=0)
    once, log_once = run(tiny_lm, [greedy_method()], cfg)
    every, log_every = run(tiny_lm, [greedy_method()], EvalConfig(**{**cfg.__dict__,
                                                                   "decode_deterministic_once": False}))
    assert sum(rows for _, rows in log_once) == 4  # one row per problem
    assert sum(rows for _, rows in log_every) == 4 * 4 * 3  # problems x n x seeds
    assert once.results == every.results and once.details["per_problem"] == every.details["per_problem"]
    assert once.details["cost"]["methods"]["Greedy"]["rows"] == 4
    assert every.details["cost"]["methods"]["Greedy"]["rows"] == 48


def test_argmax_token_adapter_that_stays_greedy_is_decoded_once(tiny_lm):
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=6, keep_trajectories=6)
    method = token_method(tiny_lm, force_greedy=True)
    once, log_once = run(tiny_lm, [method], cfg)
    every, log_every = run(tiny_lm, [copy.deepcopy(method)],
                           EvalConfig(**{**cfg.__dict__, "decode_deterministic_once": False}))
    assert [rows for per_token, rows in log_once if per_token] == [4]  # sample 0 of each prompt, seed 0 only
    assert sum(rows for _, rows in log_every) == 4 * 4 * 2
    same_outcomes(once, every, ["Token"])
    assert once.details["trajectories"]["Token"] == every.details["trajectories"]["Token"]
    assert once.details["action_usage"]["Token"][0] == 1.0
    assert once.details["cost"]["methods"]["Token"]["rows"] == 4


def test_token_rows_that_leave_greedy_or_sample_are_decoded_every_time(tiny_lm):
    cfg = EvalConfig(k_values=(1, 2), seeds=2, token_budget=6, keep_trajectories=0)
    every_cfg = EvalConfig(**{**cfg.__dict__, "decode_deterministic_once": False})
    for mode in ("argmax", "sample"):
        method = token_method(tiny_lm, mode=mode)
        with torch.no_grad():  # a policy that prefers T=1.25 (action 3) at every token
            last = [m for m in method.policy.mlp if isinstance(m, torch.nn.Linear)][-1]
            last.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 5.0]))
        once, log_once = run(tiny_lm, [method], cfg)
        every, log_every = run(tiny_lm, [copy.deepcopy(method)], every_cfg)
        assert sum(r for _, r in log_once) == sum(r for _, r in log_every) == 4 * 2 * 2, mode
        same_outcomes(once, every, ["Token"])


def test_random_argmax_adapter_outcomes_equal_the_undeduplicated_path(tiny_lm):
    """Whatever mix of all-greedy and other rows a policy gives, decoding once changes no outcome."""
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=6, keep_trajectories=8)
    method = token_method(tiny_lm, seed=7)
    with torch.no_grad():  # lean towards greedy so that some prompts stay greedy and some do not
        last = [m for m in method.policy.mlp if isinstance(m, torch.nn.Linear)][-1]
        last.bias.add_(torch.tensor([0.1, 0.0, 0.0, 0.0]))
    once, log_once = run(tiny_lm, [method], cfg)
    every, log_every = run(tiny_lm, [copy.deepcopy(method)],
                           EvalConfig(**{**cfg.__dict__, "decode_deterministic_once": False}))
    same_outcomes(once, every, ["Token"])
    assert once.details["trajectories"]["Token"] == every.details["trajectories"]["Token"]
    assert 4 < sum(r for _, r in log_once) < sum(r for _, r in log_every) == 4 * 4 * 2  # a mix of both


# ---- shared static rows and the measured cost ----------------------------------------------------------


def test_static_rows_are_decoded_once_for_every_method_that_uses_them(tiny_lm):
    cfg = EvalConfig(k_values=(1, 2), seeds=2, token_budget=5, keep_trajectories=0)
    methods = [greedy_method(), static_method(SAMPLER), mixed_method([GREEDY, SAMPLER]),
               best_per_k_method({1: GREEDY, 2: SAMPLER}, name="Best per k")]
    ev, log = run(tiny_lm, methods, cfg)
    # every row is greedy (once per problem) or SAMPLER (per seed x problem x sample): nothing twice
    assert sum(r for _, r in log) == 4 + 2 * 4 * 2
    cost = ev.details["cost"]
    assert cost["decoded_rows"] == 4 + 16
    assert cost["methods"]["Best per k"]["rows"] == 4 + 16
    assert cost["methods"]["Best"]["rows"] == 16 and cost["methods"]["Greedy"]["rows"] == 4
    shares = sum(c["seconds_share"] for c in cost["methods"].values())
    assert shares == pytest.approx(cost["decode_seconds"])
    assert cost["wall_seconds"] >= cost["decode_seconds"] > 0
    assert all(c["seconds_alone"] >= c["seconds_share"] for c in cost["methods"].values())
    assert cost["methods"]["Greedy"]["tokens"] == sum(ev.details["lengths"]["Greedy"])
