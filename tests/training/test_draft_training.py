"""The draft-gated trainer: the both-arms table (built on the tiny LM, resumable, refused under
other settings), its arm values and replayed rewards, and the planted draft world
(``training.planted``): the trainer fed the draft's confidence recovers >= 80% of the oracle's
margin on every seed, fed the prompt embedding it does not move (the control)."""

import json

import pytest

from decoding_adapters.core.stats import pass_at_k
from decoding_adapters.decoding.actions import DecodingAction
from decoding_adapters.selection.outcomes import OutcomeTable, table_header
from decoding_adapters.tasks import get_task
from decoding_adapters.training import planted
from decoding_adapters.training.draft import (
    DraftRewards,
    DraftTable,
    DraftTrainConfig,
    arm_values,
    build_draft_table,
    table_stop,
)

SAMPLER = DecodingAction(temperature=1.0)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_table_is_built_resumed_and_guarded(tmp_path, tiny_lm):
    task = get_task("arithmetic")
    problems = task.load("validation")[:3]
    path = tmp_path / "table.jsonl"
    table = build_draft_table(tiny_lm, task, problems[:2], [SAMPLER], samples=2, token_budget=4, path=path,
                              split="validation", chunk_problems=1, stop_at_answer=False)
    assert table.problem_ids == [p.id for p in problems[:2]]
    record = table.records[problems[0].id]
    assert len(record["samples"][SAMPLER.name]) == 2 and len(record["draft"]["mean_hidden"]) == tiny_lm.hidden_size
    lines = path.read_text().splitlines()
    table = build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=2, token_budget=4, path=path,
                              split="validation", stop_at_answer=False)
    assert path.read_text().splitlines()[: len(lines)] == lines and len(table.records) == 3  # kept, one added
    assert DraftTable.load(path).records == table.records
    with pytest.raises(ValueError, match="other settings"):
        build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=3, token_budget=4, path=path, split="validation",
                          stop_at_answer=False)


def _table(draft: float, samples: list[float]) -> DraftTable:
    record = {"problem": "p", "draft": {"reward": draft}, "samples": {SAMPLER.name: [{"reward": r} for r in samples]}}
    return DraftTable({"actions": [SAMPLER.to_dict()]}, {"p": record})


def test_arm_values_count_the_draft_as_one_of_the_answers():
    table = _table(0.0, [1.0, 0.0, 0.0, 0.0])
    assert arm_values(table, ["p"], [SAMPLER.name], 1).tolist() == [[0.0, 0.25]]
    assert arm_values(table, ["p"], [SAMPLER.name], 2).tolist() == [[0.0, 0.25]]  # draft wrong + 1 sample
    assert arm_values(table, ["p"], [SAMPLER.name], 3)[0, 1] == pytest.approx(0.5)  # 2 of 4 samples
    right = _table(1.0, [0.0] * 4)
    assert arm_values(right, ["p"], [SAMPLER.name], 2).tolist() == [[1.0, 1.0]]  # the draft stays an answer
    assert arm_values(right, ["p"], [SAMPLER.name], 1, redecode_cost=0.1).tolist() == [[1.0, pytest.approx(-0.1)]]


def test_arm_values_use_the_core_pass_at_k_and_clamp_a_budget_above_the_samples():
    """Above the stored samples, the re-decode arm scores all of them (k clamped to n), through
    ``core.stats.pass_at_k``."""
    table = _table(0.0, [1.0, 0.0, 0.0])  # n = 3
    for budget in (2, 3, 4, 6):
        want = pass_at_k(3, 1, min(budget - 1, 3))
        assert arm_values(table, ["p"], [SAMPLER.name], budget)[0, 1].item() == pytest.approx(want)
    assert arm_values(table, ["p"], [SAMPLER.name], 6)[0, 1].item() == 1.0  # all 3 samples: the right one


def test_replayed_rewards():
    rewards = DraftRewards([_table(1.0, [0.0] * 4)], [SAMPLER.name], seed=0, redecode_cost=0.0)
    problem = type("P", (), {"id": "p"})()
    assert rewards.rewards([problem] * 3, None, [0, 1, 1], [1, 1, 2], ["pass"] * 3, ("train", 0)).tolist() == [
        1.0, 0.0, 1.0]


def test_config_checks():
    with pytest.raises(ValueError, match="draft features"):
        DraftTrainConfig(table="t", features="tokens")
    with pytest.raises(ValueError, match="pass@B"):
        DraftTrainConfig(table="t", metric="mean")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_draft_trainer_recovers_the_planted_optimum(tmp_path, seed):
    result = planted.run_draft(seed, tmp_path)
    assert result["recovered"] >= 0.8, json.dumps(result["values"])


def test_prompt_fed_control_finds_nothing(tmp_path):
    result = planted.run_draft(0, tmp_path, features="prompt")
    assert abs(result["recovered"]) <= 0.1, json.dumps(result["values"])


def test_a_table_decoded_with_the_stop_says_so(tmp_path, tiny_lm, monkeypatch):
    """Drafts and samples decoded with the stop end at their first complete answer (here: after one
    token), the header records it, a table without it is refused under it, stored samples decoded
    without the stop cannot stand in for stopped ones, and a table of the two old flags reads as one."""
    task = get_task("arithmetic")
    monkeypatch.setattr(task, "answer_complete", lambda problem, text: True)
    problems = task.load("validation")[:2]
    path = tmp_path / "stopped.jsonl"
    table = build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=2, token_budget=4, path=path,
                              split="validation", stop_at_answer=True)
    assert table_stop(table.header) is True and table.header["stop_at_answer"] is True
    for record in table.records.values():
        assert record["draft"]["length"] == 1 and record["draft"]["confidence"][5] == 1.0
        assert [s["length"] for s in record["samples"][SAMPLER.name]] == [1, 1]
    with pytest.raises(ValueError, match="other settings"):
        build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=2, token_budget=4, path=path,
                          split="validation", stop_at_answer=False)
    unstopped = OutcomeTable(table_header(task, tiny_lm, problems, token_budget=4, seed=0, cot_ratio=0.0,
                                          samples=2, stop_at_answer=False))
    with pytest.raises(ValueError, match="stop_at_answer"):
        build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=2, token_budget=4, path=tmp_path / "s.jsonl",
                          split="train", stop_at_answer=True, stored=unstopped)
    assert table_stop({}) is False
    assert table_stop({"draft_stop_at_answer": True, "redecode_stop_at_answer": True}) is True
    assert table_stop({"draft_stop_at_answer": True}) is False
