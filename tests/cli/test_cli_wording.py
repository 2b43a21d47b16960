"""What the output says, read as a user reads it: verdicts in plain grammar, the model card's article
before the kind, and a data warning given once however often a split is loaded."""

from __future__ import annotations

import json
import logging

import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.policies.attempt import AttemptPolicy, AttemptPolicyConfig, save_attempt_adapter
from decoding_adapters.policies.kind_rule import save_rule_adapter
from decoding_adapters.reporting.verdicts import verdict_head
from decoding_adapters.tasks import get_task


def test_a_verdict_on_every_comparison_is_singular():
    assert "on every comparison at matched compute (2)," in verdict_head("Token", "Best", ["better", "better"])
    level = verdict_head("Token", "Best", ["level", "behind"])
    assert "on every comparison at matched compute," in level and "comparisons" not in level
    assert "on 1 of 2 comparisons at matched compute" in verdict_head("Token", "Best", ["better", "level"])


def test_the_model_card_says_an_attempt_policy_and_a_fixed_rule(tmp_path):
    config = AttemptPolicyConfig(("greedy", "T=0.5"), 0, (1, 2), tuple(CONFIDENCE_FEATURES), ("confidence",), 3,
                                 token_budget=5)
    torch.manual_seed(0)
    arms = [GREEDY.to_dict(), DecodingAction(temperature=0.5).to_dict()]
    save_attempt_adapter(tmp_path / "a", AttemptPolicy(config), arms, task="arithmetic")
    assert "An **attempt-policy decoding adapter**" in (tmp_path / "a" / "README.md").read_text()
    save_rule_adapter(tmp_path / "r", "esc", {"window": 2, "max_draws": 4}, arms)
    assert "A **fixed-rule decoding adapter**" in (tmp_path / "r" / "README.md").read_text()


def test_repeated_problems_are_warned_about_once(tmp_path, caplog):
    rows = [{"question": f"What is {a}+1?", "answer": str(a + 1)} for a in range(30)]
    rows.append(dict(rows[0]))  # the same question twice
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    caplog.set_level(logging.WARNING)
    task = get_task("jsonl", data=f"train={path},test={path}")
    for _ in range(3):  # the commands load a split several times (pre-flight, overlap check, decoding)
        task.load("train")
    assert caplog.text.count("repeated problem") == 1
