"""Compute accounted for every method: decodes and generated tokens per problem at each k, from
what each row cost (``DecodeResult.row_costs``), for greedy, a sampler, a per-token method, a
two-pass method (a greedy draft, then a re-decode where the draft fails) and the greedy baseline
that stops at the first answer."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, PRESETS, DecodingAction
from decoding_adapters.decoding.loop import DecodeResult
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, concat_results, take_rows
from decoding_adapters.evaluation import (
    EvalConfig,
    Method,
    evaluate,
    greedy_method,
    static_method,
    stop_at_first_answer_method,
    subset_cost,
    token_mixed_method,
)
from decoding_adapters.policies.networks import TokenPolicy, TokenPolicyConfig
from decoding_adapters.tasks import Problem, Task, chat_messages

SAMPLER = DecodingAction(True, 1.25)
CFG = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=8, keep_trajectories=4)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class ContainsOne(Task):
    """Four tiny problems; a completion is correct when it contains the character 1, and its
    answer is complete as soon as it holds a digit."""

    name = "contains-one"

    def load(self, split):
        questions = ["Say 1", "What is 2+3?", "x", "count: 1 2 3"]
        return [Problem(id=f"q{i}", question=q, answer="1") for i, q in enumerate(questions)]

    def prompt(self, problem, cot=False):
        return chat_messages(None, problem.question)

    def reward(self, problem, completion):
        return float("1" in completion)

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
    task = ContainsOne()
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
    assert info["Token greedy"]["decodes_per_problem"] == {"1": 1.0, "2": 1.0, "4": 1.0}
    lengths = ev.details["lengths"]["Token greedy"]  # [seed][problem][sample] flattened; samples are one row
    assert info["Token greedy"]["tokens_per_problem"]["4"] == pytest.approx(statistics.fmean(lengths[0:16:4]))
    assert info["Token hot"]["decodes_per_problem"] == {"1": 1.0, "2": 2.0, "4": 4.0}
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
        assert decodes == {"1": 1.0, "2": 2.0, "4": 4.0}, name  # k samples, every one its own decode
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


def test_stop_at_first_answer_ends_rows_in_the_loop_and_spends_fewer_tokens(tiny_lm):
    ev = run(tiny_lm, [greedy_method(), stop_at_first_answer_method()],
             EvalConfig(k_values=(1, 2), seeds=2, token_budget=12, keep_trajectories=4))
    greedy = {t["problem_id"]: t for t in ev.details["trajectories"]["Greedy"]}
    stopped = {t["problem_id"]: t for t in ev.details["trajectories"]["Stop at first answer"]}
    assert set(greedy) == set(stopped)
    cut = 0
    for pid, row in stopped.items():
        full = greedy[pid]
        assert full["token_ids"][: row["length"]] == row["token_ids"]  # a prefix of greedy's row
        first_digit = next((i for i, c in enumerate(full["text"]) if c.isdigit()), None)
        if first_digit is None:
            assert row["token_ids"] == full["token_ids"]
        else:  # ends on the token that wrote the first digit (a character tokenizer)
            assert row["text"] == full["text"][: first_digit + 1]
            assert row["stop_reason"] in ("answer", "eos") or row["length"] == 12  # the budget ended it first
            cut += row["length"] < full["length"]
    info = ev.details["methods"]
    assert info["Stop at first answer"]["decodes_per_problem"] == {"1": 1.0, "2": 1.0}
    tokens = info["Stop at first answer"]["tokens_per_problem"]["1"]
    assert tokens == pytest.approx(statistics.fmean(ev.details["lengths"]["Stop at first answer"]))
    assert tokens <= info["Greedy"]["tokens_per_problem"]["1"]
    assert cut >= 1 and tokens < info["Greedy"]["tokens_per_problem"]["1"]  # else the test shows nothing
    assert info["Stop at first answer"]["stop_at_answer"] is True and info["Stop at first answer"]["role"] == \
        "stop at first answer"


def test_method_options_are_checked():
    with pytest.raises(ValueError, match="rollout"):
        Method("x", "custom", [GREEDY])
    with pytest.raises(ValueError, match="rollout"):
        Method("x", "greedy", [GREEDY], rollout=draft_then_redecode)
    with pytest.raises(ValueError, match="first answer"):
        Method("x", "mixed", [GREEDY, SAMPLER], stop_at_answer=True)


def test_best_can_take_a_k_from_stopping_at_the_first_answer(tiny_lm, tmp_path):
    import json

    from decoding_adapters.evaluation import STOP_CANDIDATE, best_per_k_method, best_static_method, select_best_action
    from decoding_adapters.experiments.pipeline import best_method

    cfg = EvalConfig(k_values=(1, 2), seeds=2, token_budget=12, keep_trajectories=0)
    best = best_per_k_method({1: STOP_CANDIDATE, 2: SAMPLER})
    assert best.k_stop == {1} and best.describe()["k_actions"] == {"1": STOP_CANDIDATE, "2": SAMPLER.name}
    ev = run(tiny_lm, [stop_at_first_answer_method(), static_method(SAMPLER, name="Sampler", role="s"), best], cfg)
    per = ev.details["per_problem"]
    assert per["Best"]["pass@1"] == per["Stop at first answer"]["pass@1"]
    assert per["Best"]["pass@2"] == per["Sampler"]["pass@2"]
    assert ev.details["methods"]["Best"]["tokens_per_problem"]["1"] == \
        ev.details["methods"]["Stop at first answer"]["tokens_per_problem"]["1"]
    with pytest.raises(ValueError, match="neither"):
        best_per_k_method({1: "greedy"})
    # chosen on validation among the candidates, stopping included
    task = ContainsOne()
    chosen = select_best_action(tiny_lm, task, task.load("validation"), [SAMPLER, GREEDY], samples=2,
                                k_values=(1, 2), config=cfg, stop_at_first_answer=True)
    assert chosen.names == (SAMPLER.name, "greedy", STOP_CANDIDATE)
    assert chosen.score_for(1, STOP_CANDIDATE) == chosen.score_for(2, STOP_CANDIDATE)  # deterministic
    method = best_static_method(chosen, [SAMPLER, GREEDY])
    assert all(method.stops_at(k) == (chosen.name_for(k) == STOP_CANDIDATE) for k in (1, 2))
    # the study's Best row: stopping wins a k only when strictly ahead of the selection's best there
    actions = tmp_path / "actions.json"
    actions.write_text(json.dumps({"best_per_k": {"k_values": [1, 2], "best": {"1": "greedy", "2": SAMPLER.name},
                                                  "best_score": {"1": 0.4, "2": 0.6},
                                                  "actions": {"greedy": GREEDY.to_dict(),
                                                              SAMPLER.name: SAMPLER.to_dict()}}}))
    assert best_method(actions, (1, 2)).k_stop == frozenset()
    assert best_method(actions, (1, 2), stop_score=0.5).k_stop == {1}
    assert best_method(actions, (1, 2), stop_score=0.6).k_stop == {1}  # a tie at k=2 stays with the sampler
    assert best_method(actions, (1, 2), stop_score=0.7).k_stop == {1, 2}
