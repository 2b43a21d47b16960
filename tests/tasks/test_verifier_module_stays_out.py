"""A ``module:function`` verifier's module is never imported in the caller's process: its top-level
code would run there with no caps and write to the real stdout. The worker loads it, says whether
it names a callable (one line when not) and runs its companions (``answer_complete``)."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from decoding_adapters.tasks.jsonl import JsonlTask


@pytest.fixture()
def loud_dir(tmp_path, monkeypatch):
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "2+3?", "answer": "5"}) + "\n")
    (tmp_path / "loudcheck.py").write_text(textwrap.dedent(f"""
        import os
        print("TOP-LEVEL CODE RAN")
        with open({str(tmp_path / "imported_by")!r}, "a") as handle:
            handle.write(str(os.getpid()) + "\\n")

        def score(completion, answer):
            return float(completion.strip() == answer)

        def score_answer_complete(text):
            return text.endswith("!")
    """))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_verifier_module_runs_only_in_the_worker(loud_dir, capfd):
    task = JsonlTask(data=f"train={loud_dir / 'train.jsonl'}", verifier="loudcheck:score")
    problem = task.load("train")[0]
    assert task.answer_check == "loudcheck:score_answer_complete"
    assert task.answer_complete(problem, "5!") and not task.answer_complete(problem, "5")
    assert task.reward(problem, "5") == 1.0
    task.close()
    assert "loudcheck" not in sys.modules
    pids = (loud_dir / "imported_by").read_text().split()
    assert pids and str(os.getpid()) not in pids  # imported by the worker only
    assert "TOP-LEVEL CODE RAN" not in capfd.readouterr().out  # the worker's fd 1 is stderr


def test_a_spec_naming_no_callable_is_still_one_line(loud_dir):
    with pytest.raises(ValueError, match="module 'loudcheck' has no attribute 'missing'") as err:
        JsonlTask(data=f"train={loud_dir / 'train.jsonl'}", verifier="loudcheck:missing")
    assert "\n" not in str(err.value)
    assert "loudcheck" not in sys.modules
