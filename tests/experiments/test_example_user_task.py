"""The user-task example (examples/user_task) end to end at a tiny size on the tiny random model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "user_task"


def _load_example():
    spec = importlib.util.spec_from_file_location("user_task_example", EXAMPLE / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_example_trains_evaluates_and_writes_a_card(tmp_path, tiny_model_dir, capsys):
    example = _load_example()
    adapter_dir = example.run(
        [
            "--force",  # the tiny random model solves nothing: the pre-flight check would stop it
            "--out",
            str(tmp_path / "run"),
            "--model",
            str(tiny_model_dir),
            "--token-budget",
            "3",
            "--steps",
            "1",
            "--prompts-per-step",
            "2",
            "--group-size",
            "2",
            "--val-problems",
            "1",
            "--filter-samples",
            "0",
            "--max-train-prompts",
            "4",
            "--eval-k",
            "1",
            "--eval-seeds",
            "1",
            "--max-problems",
            "2",
        ]
    )
    config = json.loads((adapter_dir / "adapter.json").read_text())
    assert config["kind"] == "token" and config["task"] == "capitals"
    card = (adapter_dir / "README.md").read_text()
    assert "## Evaluation" in card and "| Token adapter |" in card and "| Greedy |" in card
    results = json.loads((tmp_path / "run" / "eval" / "results.json").read_text())
    assert {"Greedy", "Mixed", "Token adapter"} <= set(results)
    printed = capsys.readouterr().out
    assert "What is the capital of" in printed and "actions: [" in printed


def test_example_verifier_reads_aliases():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from check import score
    finally:
        sys.path.remove(str(EXAMPLE))
    row = {"aliases": ["Kiev"]}
    assert score("Kyiv.", "Kyiv", row) == 1.0 and score("It is Kiev", "Kyiv", row) == 1.0
    assert score("Bogotá, of course", "Bogota", {}) == 1.0
    assert score("Lviv. Not Kyiv", "Kyiv", row) == 0.0  # only the first sentence counts
