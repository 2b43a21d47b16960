"""A user's own word problems end to end: MAWPS-like (one question field) and SVAMP-like (Body +
Question) JSONL as they come, the numeric verifier's stop at the first answer, the pre-flight check,
and an adapter trained on them used again by ``generate`` and ``from_pretrained`` without retyping."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from decoding_adapters.cli import build_parser, main
from decoding_adapters.cli.common import build_task
from decoding_adapters.policies.networks import load_adapter
from decoding_adapters.tasks import get_task, score_gsm8k, task_from_record, task_record

DATA = Path(__file__).resolve().parents[1] / "data"
SVAMP = DATA / "svamp_like.jsonl"
MAWPS = DATA / "mawps_like.jsonl"
SVAMP_TASK = ["--task", "jsonl", "--data", str(SVAMP), "--question-template", "{Body} {Question}",
              "--answer-field", "Answer", "--verifier", "numeric", "--instruction", "Answer with a number."]
TINY_DRAFT = ["--token-budget", "4", "--steps", "1", "--prompts-per-step", "2", "--max-train-prompts", "3",
              "--val-problems", "1", "--table-samples", "1", "--actions", "math-token"]


def test_a_question_template_joins_fields_and_the_instruction_follows_the_question():
    args = build_parser("train-token").parse_args(["train-token", *SVAMP_TASK, "--out", "x"])
    task = build_task(args)
    problem = next(p for split in task.splits for p in task.load(split) if p.meta["ID"] == "chal-0")
    assert problem.question == ("Jake has 7 fewer peaches than Steven. Steven has 19 peaches. "
                                "How many peaches does Jake have?")
    assert float(problem.answer) == 12.0 and problem.meta["Body"].startswith("Jake")  # the fields stay in meta
    assert task.prompt(problem)[-1]["content"].endswith("How many peaches does Jake have?\n\nAnswer with a number.")
    assert task.reward(problem, "19 - 7 = 12\n") == 1.0 and task.reward(problem, "19 + 7 = 26") == 0.0
    with pytest.raises(ValueError, match="Missing"):  # a template naming no field of the file says which line
        get_task("jsonl", data=str(SVAMP), question_template="{Missing}", answer_field="Answer").load("train")


@pytest.mark.parametrize("text,complete", [
    ("19 - 7 = 1", False),  # 1 may become 12
    ("19 - 7 = 12\n", True),  # a line that ends in a number: the extraction's last number
    ("19 - 7 = 12 peaches", True),  # a number after "=" that a word follows
    ("The answer is 12", False),
    ("The answer is 12 because", True),
    ("So Jake has $12.\n", True),
    ("First, Steven has 19 peaches", False),
    ("\\boxed{12}", True),
])
def test_the_numeric_verifier_stops_at_its_first_complete_number(text, complete):
    task = get_task("jsonl", data=str(MAWPS), question_field="Question", answer_field="Answer", verifier="numeric")
    problem = task.load("train")[0]
    assert task.answer_complete(problem, text) is complete
    assert task.answer_check is not None
    if complete:  # what was stopped is what the verifier reads
        assert score_gsm8k(text, "12") == (1.0 if "12" in text else 0.0)


def test_a_verifier_of_your_own_brings_its_check_or_the_stop_is_off(tmp_path, monkeypatch):
    (tmp_path / "mychecks.py").write_text(
        "def plain(completion, answer):\n    return float(completion.strip() == answer)\n\n"
        "def stops(completion, answer):\n    return float(completion.strip() == answer)\n\n"
        "def stops_answer_complete(text):\n    return text.endswith('!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = get_task("jsonl", data=str(MAWPS), question_field="Question", answer_field="Answer",
                     verifier="mychecks:plain")
    stops = get_task("jsonl", data=str(MAWPS), question_field="Question", answer_field="Answer",
                     verifier="mychecks:stops")
    problem = plain.load("train")[0]
    assert plain.answer_check is None and not plain.answer_complete(problem, "13\n")
    assert stops.answer_check == "mychecks:stops_answer_complete" and stops.answer_complete(problem, "13!")


def test_a_task_record_rebuilds_the_task_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(DATA)
    task = get_task("jsonl", data="train=svamp_like.jsonl", question_template="{Body} {Question}",
                    answer_field="Answer", verifier="numeric", instruction="Answer with a number.")
    record = task_record(task)
    assert record["data"] == {"train": str(SVAMP)} and record["verifier"] == "numeric"
    assert record["question_template"] == "{Body} {Question}" and record["instruction"] == "Answer with a number."
    json.dumps(record)
    questions = [p.question for p in task.load("train")]
    monkeypatch.chdir(tmp_path)
    assert [p.question for p in task_from_record("jsonl", record).load("train")] == questions


def test_every_trainer_refuses_a_start_where_nothing_is_solved(tiny_model_dir, tmp_path, capsys, caplog):
    token = ["train-token", "--model", str(tiny_model_dir), *SVAMP_TASK, "--token-budget", "4", "--steps", "1",
             "--prompts-per-step", "2", "--max-train-prompts", "4", "--val-problems", "1", "--filter-samples", "0"]
    assert main([*token, "--out", str(tmp_path / "tok")]) == 2
    err = capsys.readouterr().err
    assert "nothing was solved" in err and "--force" in err and "cut by the token budget" in err
    draft = ["train-draft", "--model", str(tiny_model_dir), *SVAMP_TASK, *TINY_DRAFT]
    assert main([*draft, "--out", str(tmp_path / "draft")]) == 2
    assert "nothing was solved (the training table" in capsys.readouterr().err + caplog.text
    assert not (tmp_path / "draft" / "adapter.json").exists()


def test_a_draft_adapter_on_two_field_jsonl_generates_without_retyping(tiny_model_dir, tmp_path, capsys, caplog):
    data = tmp_path / "svamp.jsonl"
    shutil.copy(SVAMP, data)
    out = tmp_path / "draft"
    task = SVAMP_TASK[:2] + ["--data", str(data)] + SVAMP_TASK[4:]
    assert main(["train-draft", "--force", "--model", str(tiny_model_dir), *task, *TINY_DRAFT, "--out", str(out)]) == 0
    assert "pre-flight: nothing was solved" in caplog.text and "training anyway" in caplog.text  # --force: warned
    _, config = load_adapter(out)
    assert config.task == "jsonl" and config.task_options["question_template"] == "{Body} {Question}"
    assert config.task_options["data"] == str(data.resolve()) and config.task_options["verifier"] == "numeric"
    printed = capsys.readouterr()
    assert "problems\n" not in printed.out and "draft tables: 100%" in printed.err  # one bar, not a line a chunk
    assert main(["generate", "--adapter", str(out), "Tom has 3 apples and buys 4. How many?", "--json",
                 "--token-budget", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["generations"]
    from decoding_adapters.serving.adapter import Adapter

    assert Adapter.from_pretrained(out, lm="base").generator().answer_task.answer_check is not None
    data.unlink()  # the recorded file is gone: the task still rebuilds (nothing reads it to generate)
    assert main(["generate", "--adapter", str(out), "Two plus two?", "--data", str(SVAMP), "--token-budget",
                 "2"]) == 0


def test_draft_methods_name_the_generator(tiny_model_dir, tmp_path):
    from decoding_adapters.serving.adapter import Adapter

    out = tmp_path / "draft"
    assert main(["train-draft", "--force", "--model", str(tiny_model_dir), "--task", "arithmetic", *TINY_DRAFT,
                 "--out", str(out)]) == 0
    adapter = Adapter.from_pretrained(out)
    for call in (lambda: adapter.logits_processor(object()), lambda: adapter.generation_config(["hi"])):
        with pytest.raises(ValueError, match=r"adapter\.generator\(\)"):
            call()


def test_train_draft_lists_only_the_options_it_takes(capsys):
    assert main(["train-draft", "--help-all"]) == 0
    text = capsys.readouterr().out
    assert "--replay" not in text and "--metric" not in text and "draft's summary" in text
    from decoding_adapters.training.draft import DraftTrainConfig

    with pytest.raises(ValueError, match="group_size has no effect with full_information"):
        DraftTrainConfig(table="t", group_size=4)
    assert DraftTrainConfig(table="t", group_size=4, full_information=False).group_size == 4


def test_a_draft_adapter_on_a_verifier_without_an_answer_check_records_the_stop_as_off(
        tiny_model_dir, tmp_path, monkeypatch, caplog):
    (tmp_path / "plainchecks.py").write_text("def score(completion, answer):\n    return 0.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "draft"
    argv = ["train-draft", "--force", "--model", str(tiny_model_dir), "--task", "jsonl", "--data", str(MAWPS),
            "--question-field", "Question", "--answer-field", "Answer", "--verifier", "plainchecks:score",
            *TINY_DRAFT, "--out", str(out)]
    assert main(argv) == 0
    assert "not stopped at the first answer" in caplog.text
    _, config = load_adapter(out)
    assert config.stop_at_answer is False and config.training["stop_at_answer"] is False
    header = json.loads((out / "tables" / "train.jsonl").read_text().splitlines()[0])["header"]
    assert "stop_at_answer" not in header


def test_a_recorded_verifier_of_your_own_is_not_run_unless_named_again(tmp_path, monkeypatch):
    """adapter.json's task_options may name any importable function: rebuilding the task from the
    record must not import it unasked (a downloaded adapter is not trusted code)."""
    marker = tmp_path / "imported"
    (tmp_path / "evilchecks.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef score(completion, answer):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from decoding_adapters.tasks import task_from_record

    record = {"data": str(MAWPS), "question_field": "Question", "answer_field": "Answer",
              "verifier": "evilchecks:score"}
    with pytest.raises(ValueError, match="cannot vouch for"):
        task_from_record("jsonl", record)
    assert not marker.exists()
    task = task_from_record("jsonl", record, verifier="evilchecks:score")  # named again: the user's choice
    assert task is not None
    assert task_from_record("jsonl", {**record, "verifier": "numeric"}) is not None  # a named verifier is no code
