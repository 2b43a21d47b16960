"""Compute accounted for every method: decodes and generated tokens per problem at each k, from
what each row cost (``DecodeResult.row_costs``), for greedy, a sampler, a per-token method, a
two-pass method (a greedy draft, then a re-decode where the draft fails) and the greedy baseline
decoded to the budget; every sample ending at its first answer (the protocol)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, PRESETS, DecodingAction
from decoding_adapters.decoding.loop import DecodeResult
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, concat_results, take_rows
from decoding_adapters.evaluation import (
    GREEDY_TO_BUDGET,
    EvalConfig,
    Method,
    evaluate,
    greedy_method,
    greedy_to_budget_method,
    static_method,
    subset_cost,
    token_mixed_method,
)
from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyConfig
from helpers import ContainsOne

SAMPLER = DecodingAction(True, 1.25)
CFG = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=8, keep_trajectories=4)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class ContainsOneToADigit(ContainsOne):
    """The contains-one task whose answer is complete as soon as it holds a digit."""

    def answer_complete(self, problem, text):
        return any(c.isdigit() for c in text)


def draft_then_redecode(rollouts, request: RolloutRequest, seed: int) -> DecodeResult:
    """A two-pass method: a greedy draft for every row; where the draft states no answer (no
    digit), a re-decode with the sampler replaces it. It reports both passes in its rows' costs."""
    greedy, sampler = rollouts.action_set.actions.index(GREEDY), rollouts.action_set.actions.index(SAMPLER)
    n = request.num_rows
    draft = rollouts.run(dataclasses.replace(request, row_actions=[greedy] * n))
    redo = [r for r in range(n) if not any(c.isdigit() for c in draft.texts[r])]
    kept = [r for r in range(n) if r not in redo]
    parts = [(kept, take_rows(draft, kept))] if kept else []
    if redo:
        second = rollouts.run(dataclasses.replace(request.subset(redo), row_actions=[sampler] * len(redo)))
        parts.append((redo, second))
    merged = concat_results(parts, n, request.prompts, request.prompt_of_row)
    is_redo = torch.zeros(n, dtype=torch.long)
    is_redo[redo] = 1
    merged.decodes = 1 + is_redo
    merged.generated_tokens = draft.lengths + is_redo * merged.lengths
    TWO_PASS_LOG.append((draft.lengths.clone(), redo, merged.lengths.clone()))
    return merged


TWO_PASS_LOG: list = []


def run(lm, methods, cfg=CFG):
    task = ContainsOneToADigit()
    factory = lambda action_set, per_token: HFRollouts(lm, action_set, 16)  # noqa: E731
    return evaluate(lm, task, task.load("test"), methods, cfg, rollouts_factory=factory)


def token_adapter(lm, name: str, mode: str, prefer: int) -> Method:
    """A token adapter over math-token whose policy prefers action ``prefer`` at every token."""
    torch.manual_seed(0)
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=8))
    with torch.no_grad():
        last = [m for m in policy.mlp if isinstance(m, torch.nn.Linear)][-1]
        last.weight.zero_()
        last.bias.copy_(torch.nn.functional.one_hot(torch.tensor(prefer), 4).float() * 5)
    return Method(name, "token", list(PRESETS["math-token"]), role="w/ budget", level="token", policy=policy,
                  policy_mode=mode)


def test_token_adapters_cost_k_decodes_unless_their_rows_are_deterministic(tiny_lm):
    ev = run(tiny_lm, [token_adapter(tiny_lm, "Token greedy", "argmax", 0),
                       token_adapter(tiny_lm, "Token hot", "sample", 3)])
    info = ev.details["methods"]
    # argmax at greedy everywhere: one row per problem stands for every sample (decoded once)
    assert info["Token greedy"]["decodes_per_problem"] == {"1": 1.0, "2": 1.0, "4": 1.0, "answer": 1.0}
    lengths = ev.details["lengths"]["Token greedy"]  # [seed][problem][sample] flattened; samples are one row
    assert info["Token greedy"]["tokens_per_problem"]["4"] == pytest.approx(statistics.fmean(lengths[0:16:4]))
    assert info["Token hot"]["decodes_per_problem"] == {"1": 1.0, "2": 2.0, "4": 4.0, "answer": 1.0}
    mean_tokens = statistics.fmean(ev.details["lengths"]["Token hot"])  # every sample of every seed decoded
    assert info["Token hot"]["tokens_per_problem"]["2"] == pytest.approx(2 * mean_tokens)


def test_subset_cost_counts_a_shared_generation_once():
    costs = {"g": (1, 10), "a": (1, 4), "b": (2, 6), "c": (1, 2), "d": (1, 8)}
    assert subset_cost(["g"] * 4, costs, 1) == (1, 10) == subset_cost(["g"] * 4, costs, 4)  # greedy: one decode
    d, t = subset_cost(["a", "b", "c", "d"], costs, 2)  # distinct samples: k times the mean
    assert d == pytest.approx(2 * 5 / 4) and t == pytest.approx(2 * 20 / 4)
    assert subset_cost(["a", "b", "c", "d"], costs, 4) == pytest.approx((5, 20))
    d, _ = subset_cost(["g", "g", "a", "c"], costs, 2)  # g is among 2 of 4 with probability 1 - C(2,2)/C(4,2)
    assert d == pytest.approx((1 - 1 / 6) + 2 * (1 - 3 / 6))
    with pytest.raises(ValueError):
        subset_cost(["a"], costs, 2)


def test_decodes_and_tokens_per_problem_for_every_kind_of_method(tiny_lm):
    TWO_PASS_LOG.clear()
    actions = list(PRESETS["math-token"])
    two_pass = Method("Two-pass", "custom", [GREEDY, SAMPLER], role="draft-gated", rollout=draft_then_redecode)
    methods = [greedy_method(), static_method(SAMPLER, name="Sampler", role="sampler"), token_mixed_method(actions),
               two_pass]
    ev = run(tiny_lm, methods)
    info, compute = ev.details["methods"], ev.details["compute"]
    greedy_lengths = ev.details["lengths"]["Greedy"]  # one decode per problem
    for k in ("1", "2", "4"):
        assert info["Greedy"]["decodes_per_problem"][k] == 1.0  # deterministic: one decode whatever k
        assert info["Greedy"]["tokens_per_problem"][k] == pytest.approx(statistics.fmean(greedy_lengths))
    for name in ("Sampler", "Mixed (per token)"):
        decodes, tokens = info[name]["decodes_per_problem"], info[name]["tokens_per_problem"]
        assert decodes == {"1": 1.0, "2": 2.0, "4": 4.0, "answer": 1.0}, name  # k samples, every one its own decode
        # n = 4 samples per problem and seed: k of them cost k times their mean length
        mean_tokens = statistics.fmean(ev.details["per_problem"][name]["mean_length"][i][s]
                                       for i in range(4) for s in range(CFG.seeds))
        for k in (1, 2, 4):
            assert tokens[str(k)] == pytest.approx(k * mean_tokens), (name, k)
        assert len(compute[name]["decodes"]["4"]) == 4  # one value per problem
    # the two-pass method: one decode where the draft was kept, two where it re-decoded, both passes' tokens
    expected_decodes, expected_tokens = [], []
    for draft_lengths, redo, final_lengths in TWO_PASS_LOG:
        for r in range(len(draft_lengths)):
            expected_decodes.append(2 if r in redo else 1)
            expected_tokens.append(int(draft_lengths[r]) + (int(final_lengths[r]) if r in redo else 0))
    assert 1.0 < statistics.fmean(expected_decodes) < 2.0  # some drafts kept, some re-decoded (else a weak test)
    assert info["Two-pass"]["decodes_per_problem"]["1"] == pytest.approx(statistics.fmean(expected_decodes))
    assert info["Two-pass"]["tokens_per_problem"]["1"] == pytest.approx(statistics.fmean(expected_tokens))
    assert info["Two-pass"]["decodes_per_problem"]["4"] == pytest.approx(4 * statistics.fmean(expected_decodes))
    assert ev.details["methods"]["Two-pass"]["kind"] == "custom"


def test_greedy_stops_at_the_first_answer_by_default_and_spends_fewer_tokens(tiny_lm):
    ev = run(tiny_lm, [greedy_method(), greedy_to_budget_method()],
             EvalConfig(k_values=(1, 2), seeds=2, token_budget=12, keep_trajectories=4))
    assert ev.details["config"]["stop_at_answer"] is True  # the protocol's default
    full_rows = {t["problem_id"]: t for t in ev.details["trajectories"][GREEDY_TO_BUDGET]}
    stopped = {t["problem_id"]: t for t in ev.details["trajectories"]["Greedy"]}
    assert set(full_rows) == set(stopped)
    cut = 0
    for pid, row in stopped.items():
        full = full_rows[pid]
        assert full["token_ids"][: row["length"]] == row["token_ids"]  # a prefix of the unstopped row
        first_digit = next((i for i, c in enumerate(full["text"]) if c.isdigit()), None)
        if first_digit is None:
            assert row["token_ids"] == full["token_ids"]
        else:  # ends on the token that wrote the first digit (a character tokenizer)
            assert row["text"] == full["text"][: first_digit + 1]
            assert row["stop_reason"] in ("answer", "eos") or row["length"] == 12  # the budget ended it first
            cut += row["length"] < full["length"]
    info = ev.details["methods"]
    assert info["Greedy"]["decodes_per_problem"] == {"1": 1.0, "2": 1.0, "answer": 1.0}
    tokens = info["Greedy"]["tokens_per_problem"]["1"]
    assert tokens == pytest.approx(statistics.fmean(ev.details["lengths"]["Greedy"]))
    assert cut >= 1 and tokens < info[GREEDY_TO_BUDGET]["tokens_per_problem"]["1"]  # else the test shows nothing
    assert info[GREEDY_TO_BUDGET]["stop_at_answer"] is False and "stop_at_answer" not in info["Greedy"]


def test_without_the_stop_greedy_is_greedy_to_the_budget(tiny_lm):
    cfg = EvalConfig(k_values=(1, 2), seeds=1, token_budget=12, keep_trajectories=4, stop_at_answer=False)
    ev = run(tiny_lm, [greedy_method(), greedy_to_budget_method()], cfg)
    rows = ev.details["trajectories"]
    assert [t["token_ids"] for t in rows["Greedy"]] == [t["token_ids"] for t in rows[GREEDY_TO_BUDGET]]
    assert ev.details["config"]["stop_at_answer"] is False


def test_every_sample_of_every_method_stops_under_the_protocol(tiny_lm):
    """A sampler's rows, a per-token mixture's rows and a custom rollout's request all end at the
    first complete answer (a digit), not only greedy's."""
    seen = []

    def own(rollouts, request, seed):
        seen.append(request.stop_checks)
        return rollouts.run(dataclasses.replace(request, row_actions=[0] * request.num_rows))

    methods = [static_method(SAMPLER, name="Sampler", role="s"), token_mixed_method([GREEDY, SAMPLER]),
               Method("Own", "custom", [SAMPLER], rollout=own)]
    ev = run(tiny_lm, methods, EvalConfig(k_values=(1, 2), seeds=1, token_budget=12, keep_trajectories=8))
    for name in ("Sampler", "Mixed (per token)", "Own"):
        rows = ev.details["trajectories"][name]
        assert rows
        for row in rows:
            digits = [i for i, c in enumerate(row["text"]) if c.isdigit()]
            assert not digits or digits[0] == len(row["text"]) - 1 or row["stop_reason"] == "eos", (name, row["text"])
    assert seen and all(checks is not None and all(c is not None for c in checks) for checks in seen)


def test_method_options_are_checked():
    with pytest.raises(ValueError, match="rollout"):
        Method("x", "custom", [GREEDY])
    with pytest.raises(ValueError, match="rollout"):
        Method("x", "greedy", [GREEDY], rollout=draft_then_redecode)
    with pytest.raises(ValueError, match="family"):
        Method("x", "mixed", [GREEDY, SAMPLER], family="oracle")
    assert Method("x", "mixed", [GREEDY, SAMPLER]).family == "static"


def test_best_candidates_are_scored_under_the_stop(tiny_lm, tmp_path):
    import json

    from decoding_adapters.evaluation import best_static_method, select_best_action
    from decoding_adapters.experiments.pipeline import best_method

    task = ContainsOneToADigit()
    stopped = EvalConfig(k_values=(1, 2), seeds=1, token_budget=12, keep_trajectories=0)
    unstopped = dataclasses.replace(stopped, stop_at_answer=False)
    chosen = {cfg.stop_at_answer: select_best_action(tiny_lm, task, task.load("validation"), [SAMPLER, GREEDY],
                                                     samples=2, k_values=(1, 2), config=cfg)
              for cfg in (stopped, unstopped)}
    assert chosen[True].names == (SAMPLER.name, "greedy")
    # greedy's candidate score is that of the greedy row each setting decodes
    greedy_scores = {stop: chosen[stop].score_for(1, "greedy") for stop in (True, False)}
    ev = run(tiny_lm, [greedy_method(), greedy_to_budget_method()], stopped)
    assert greedy_scores[True] == pytest.approx(ev.results["Greedy"]["pass@1"]["mean"])
    assert greedy_scores[False] == pytest.approx(ev.results[GREEDY_TO_BUDGET]["pass@1"]["mean"])
    method = best_static_method(chosen[True], [SAMPLER, GREEDY])
    assert method.stop_at_answer is None and method.stops(stopped) and not method.stops(unstopped)
    actions = tmp_path / "actions.json"
    actions.write_text(json.dumps({"best_per_k": {"k_values": [1, 2], "best": {"1": "greedy", "2": SAMPLER.name},
                                                  "best_score": {"1": 0.4, "2": 0.6},
                                                  "actions": {"greedy": GREEDY.to_dict(),
                                                              SAMPLER.name: SAMPLER.to_dict()}}}))
    assert best_method(actions, (1, 2)).k_actions == {1: GREEDY, 2: SAMPLER}