"""A new user's second hour, command by command: one JSONL file, tiny or empty runs, Ctrl-C and
``--resume``, real data with other field names, near-duplicates and named verifiers, and help that
fits a screen."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from decoding_adapters.cli import COMMANDS, main
from decoding_adapters.tasks import check_disjoint, get_task

ROOT = Path(__file__).resolve().parents[2]
TINY_TOKEN = ["--force", "--token-budget", "4", "--val-problems", "2", "--max-train-prompts", "4",
              "--prompts-per-step", "2",
              "--group-size", "2", "--filter-samples", "0"]


def _rows(path: Path, n: int, fields=("question", "answer")) -> Path:
    q, a = fields
    path.write_text("".join(json.dumps({q: f"What is {i} plus {3 * i}?", a: str(4 * i)}) + "\n" for i in range(n)))
    return path


def test_one_jsonl_file_is_divided_80_10_10_by_content_hash(tmp_path):
    task = get_task("jsonl", data=str(_rows(tmp_path / "rows.jsonl", 400)))
    sizes = {split: len(task.load(split)) for split in task.splits}
    assert task.splits == ("train", "validation", "test") and sum(sizes.values()) == 400
    assert 280 <= sizes["train"] <= 360 and 20 <= sizes["validation"] <= 60 and 20 <= sizes["test"] <= 60
    check_disjoint(task)  # no overlap: the bands divide the file


def test_train_token_on_one_file_and_with_no_steps(tiny_model_dir, tmp_path):
    data = _rows(tmp_path / "rows.jsonl", 40)
    base = ["train-token", "--model", str(tiny_model_dir), "--task", "jsonl", "--data", str(data), *TINY_TOKEN]
    assert main([*base, "--steps", "1", "--out", str(tmp_path / "one")]) == 0
    assert main([*base, "--steps", "0", "--filter-samples", "4", "--out", str(tmp_path / "zero")]) == 0
    assert (tmp_path / "zero" / "adapter.json").is_file()


def test_a_one_row_train_file_is_one_clear_line(tiny_model_dir, tmp_path, capsys):
    one = _rows(tmp_path / "one.jsonl", 1)
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"question": "What is 9 plus 9?", "answer": "18"}) + "\n")
    argv = ["train-token", "--model", str(tiny_model_dir), "--task", "jsonl", "--data", f"train={one},test={test}",
            "--steps", "1", *TINY_TOKEN[:-2], "--out", str(tmp_path / "x")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no training prompt left" in err and "max()" not in err


def test_interrupt_after_filtering_keeps_a_checkpoint_and_resume_reads_the_options_back(
        tiny_model_dir, tmp_path, capsys, monkeypatch):
    from decoding_adapters.training.token import TokenTrainer

    out = tmp_path / "tok"
    argv = ["train-token", "--model", str(tiny_model_dir), "--steps", "2", *TINY_TOKEN, "--out", str(out)]

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(TokenTrainer, "train_step", interrupted)
    assert main(argv) == 130
    assert "add --resume" in capsys.readouterr().err
    monkeypatch.undo()
    # the options are read back from the run: only --out and --resume are typed again
    assert main(["train-token", "--out", str(out), "--resume"]) == 0
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 1, 2]


def test_interrupt_before_anything_is_saved_says_so(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from decoding_adapters.training.token import TokenTrainer

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(TokenTrainer, "prepare", interrupted)
    argv = ["train-token", "--model", str(tiny_model_dir), "--steps", "2", *TINY_TOKEN, "--out", str(tmp_path / "t")]
    assert main(argv) == 130
    assert "nothing saved yet" in capsys.readouterr().err


def test_real_data_field_names_named_verifiers_and_near_duplicates(tmp_path):
    train = _rows(tmp_path / "train.jsonl", 20, fields=("input", "target"))
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"input": "What is 3  plus 9 ?", "target": "12"}) + "\n"  # a near-duplicate of row 4
                    + json.dumps({"input": "What is 100 plus 1?", "target": "101"}) + "\n")
    data = f"train={train},test={test}"
    task = get_task("jsonl", data=data, question_field="input", answer_field="target", verifier="numeric")
    problem = task.load("test")[1]
    assert task.reward(problem, "The sum is 101.") == 1.0 and task.reward(problem, "100") == 0.0
    with pytest.raises(ValueError) as refused:
        check_disjoint(task)
    message = str(refused.value)
    assert f"{train}:4" in message and f"{test}:1" in message and "What is 3 plus 9 ?" in message
    assert "--drop-overlap" in message
    task.close()
    kept = get_task("jsonl", data=data, question_field="input", answer_field="target", drop_overlap=True)
    check_disjoint(kept)
    assert len(kept.load("train")) == 19
    math = get_task("jsonl", data=data, question_field="input", answer_field="target", verifier="math")
    assert math.reward(problem, "so \\boxed{101}") == 1.0
    math.close()
    kept.close()


def test_a_verifier_module_in_the_current_folder_imports_from_a_script_elsewhere(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "check.py").write_text("def score(completion, answer):\n    return 1.0\n")
    _rows(tmp_path / "rows.jsonl", 10)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.py").write_text(
        "from decoding_adapters.tasks import get_task\n"
        "task = get_task('jsonl', data='rows.jsonl', verifier='mypkg.check:score')\n"
        "print(task.reward(task.load('train')[0], 'x'))\n")
    done = subprocess.run([sys.executable, "scripts/run.py"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1.0"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_fits_two_screens_and_prints_each_default_once(command, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    assert len(text.splitlines()) <= 120, (command, len(text.splitlines()))
    assert "(default: None)" not in text and "--token." not in text
    assert "--help-all" in text
    for block in text.split("\n  -")[1:]:
        stated = block.count("(default:")
        assert stated <= 1 and not (stated and "default:" in block.split("(default:")[0]), block
    assert main([command, "--help"]) == 0  # the second time from the cache: the same text
    assert capsys.readouterr().out == text
    assert main([command, "--help-all"]) == 0
    full = capsys.readouterr().out
    assert set(re.findall(r"--[a-z][a-z.-]+", text)) - {"--help-all"} <= set(re.findall(r"--[a-z][a-z.-]+", full))


def test_required_options_show_no_default(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["train-token", "--help-all"]) == 0
    text = capsys.readouterr().out
    assert "--out OUT" in text
    out_help = text.split("  --out OUT", 1)[1].split("\n  --", 1)[0]
    assert "default" not in out_help


def test_python_dash_m_runs_the_command():
    done = subprocess.run([sys.executable, "-m", "decoding_adapters", "--help"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0 and "select-actions" in done.stdout


def test_a_hub_id_is_its_cached_snapshot_or_one_clear_error(tmp_path, capsys, monkeypatch):
    import huggingface_hub

    def not_cached(*args, **kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError("not in the cache")

    def offline(self, *args, **kwargs):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_cached)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", offline)
    assert main(["model-path", "--model", "someorg/somemodel"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'someorg/somemodel'" in err and "network" in err
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(snapshot))
    assert main(["model-path", "--model", "someorg/somemodel"]) == 0
    assert capsys.readouterr().out.strip() == str(snapshot)


def test_generation_configs_are_valid_for_transformers_without_warnings():
    from transformers import GenerationConfig

    from decoding_adapters.decoding.actions import GREEDY, PRESETS
    from decoding_adapters.serving.adapter import generation_kwargs

    for action in [GREEDY, *PRESETS["math"]]:
        GenerationConfig(**generation_kwargs(action, 4)).validate(strict=True)  # raises where it would warn


def test_an_extrapolated_pass_at_k_never_falls_below_the_measured_one():
    import numpy as np

    from decoding_adapters.selection.best import best_static_from_counts

    correct = np.array([[1, 2], [1, 0], [2, 0], [0, 1]])  # 4 problems x 2 candidates, 2 samples per cell
    best = best_static_from_counts(correct, 2, (1, 2, 4, 8), ["a", "b"])
    for name in ("a", "b"):
        scores = [best.score_for(k, name) for k in (1, 2, 4, 8)]
        assert scores == sorted(scores), (name, scores)


def test_a_stored_help_screen_prints_without_importing_the_library(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path),
           "COLUMNS": "100"}
    warm = "from decoding_adapters.cli import COMMANDS, warm_help_cache; print(warm_help_cache(), len(COMMANDS))"
    done = subprocess.run([sys.executable, "-c", warm], env=env, capture_output=True, text=True, timeout=300)
    stored, commands = map(int, done.stdout.split())
    assert stored == 1 + 2 * commands
    probe = ("import sys; from decoding_adapters.cli import main; main(['train-token', '--help']); "
             "print('torch' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert "--out OUT" in done.stdout and done.stderr.strip() == "False"


def test_the_training_bar_shows_a_validation_only_on_steps_that_validated(tmp_path, monkeypatch):
    from dataclasses import dataclass

    import torch

    import decoding_adapters.training.common as common

    shown = []

    class Bar:
        def __init__(self, *args, **kwargs):
            pass

        def set_postfix(self, **values):
            shown.append(values)

        def update(self, n):
            pass

        def close(self):
            pass

    @dataclass(frozen=True)
    class Config:
        steps: int = 4
        val_every: int = 2
        checkpoint_every: int = 2
        seed: int = 0

    class Loop(common.TrainingLoop):
        def __init__(self, out):
            self.config = Config()
            self._init_loop(out, progress=True)
            self.policy = torch.nn.Linear(1, 1)

        def train_step(self):
            return {"reward": 0.5}

        def validate(self):
            return common.Validation(torch.tensor([0.25, 0.75]), mode="argmax")

        def state(self):
            return {}

        def save(self):
            return self.out_dir

    monkeypatch.setattr(common, "tqdm", Bar)
    Loop(tmp_path / "run").train()
    assert [s.get("val") for s in shown] == [None, "0.50 (argmax)", None, "0.50 (argmax)"]
    assert all("nan" not in str(s) for s in shown)
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


def test_evaluate_says_first_when_nothing_was_solved(tiny_model_dir, tmp_path, capsys):
    data = _rows(tmp_path / "rows.jsonl", 60, fields=("input", "target"))
    argv = ["evaluate", "--model", str(tiny_model_dir), "--task", "jsonl", "--data", str(data), "--question-field",
            "input", "--answer-field", "target", "--verifier", "numeric", "--token-budget", "2", "--baselines",
            "greedy", "--k", "1", "--seeds", "1", "--max-problems", "3", "--no-progress", "--out", str(tmp_path / "e")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.index("Nothing was solved") < printed.index("Greedy")  # the random tiny model solves nothing


def test_a_folder_without_an_adapter_names_the_api_that_writes_one(tmp_path):
    from decoding_adapters.policies.networks import load_adapter

    with pytest.raises(FileNotFoundError, match="Adapter.save_pretrained") as missing:
        load_adapter(tmp_path)
    assert "save_adapter" not in str(missing.value)
