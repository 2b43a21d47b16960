"""No result silently stale, overwritten or lost, and one-line errors (naming the file) instead of
tracebacks on bad input."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, replace

import pytest

from conftest import make_tiny_lm
from decoding_adapters.cli import main
from decoding_adapters.decoding import actions as actions_module
from decoding_adapters.decoding.actions import GREEDY, PRESETS, ActionSet, DecodingAction, load_action_set
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm, resolve_dtype
from decoding_adapters.policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyConfig,
    load_adapter,
    save_adapter,
)
from decoding_adapters.selection.outcomes import evaluate_pool
from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.base import read_jsonl
from decoding_adapters.training.common import check_resume
from decoding_adapters.training.sequence import SequenceTrainConfig, reward_source
from decoding_adapters.training.token import TokenTrainConfig

# The CLI loads the LM with dtype "auto" on device "auto": bfloat16 on GPUs and on CPUs with native
# bf16, float32 elsewhere.
AUTO_DTYPE = str(resolve_dtype("auto", ModelSpec().torch_device)).removeprefix("torch.")


def _write(path, text: str | bytes):
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# ---------------------------------------------------------------- decoding actions


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 50.0},
        {"temperature": math.inf},
        {"temperature": math.nan},
        {"temperature": "hot"},
        {"temperature": None},
        {"top_k": True},
        {"top_k": 2.5},
        {"top_p": "0.9"},
        {"min_p": True},
    ],
)
def test_decoding_action_rejects_bad_values(fields):
    with pytest.raises(ValueError):
        DecodingAction(**fields)


def test_decoding_action_accepts_the_bound():
    bound = actions_module.MAX_TEMPERATURE
    assert DecodingAction(temperature=bound).temperature == bound
    assert DecodingAction(temperature=1, top_k=5).name == "T=1,top_k=5"


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"names": ["a"]}', "'actions'"),
        ("3", "list of actions"),
        ("[1, 2]", "action 0"),
        ('[{"temperature": "hot"}]', "temperature"),
        ('[{"temperature": null}]', "temperature"),
        ('[{"temperature": 1e999}]', "temperature"),
        ('{"actions": [{"top_k": true}]}', "top_k"),
        ("{not json", "not a JSON action file"),
    ],
)
def test_bad_action_file_is_one_line_naming_the_file(tmp_path, content, expected):
    path = _write(tmp_path / "acts.json", content)
    with pytest.raises(ValueError) as err:
        load_action_set(path)
    message = str(err.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_bad_action_file_through_the_cli(tmp_path, capsys):
    path = _write(tmp_path / "acts.json", '{"names": []}')
    code = main(["train-sequence", "--actions", str(path), "--model", str(tmp_path / "nomodel"),
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and str(path) in err


# ---------------------------------------------------------------- data files: errors before the model loads

NO_MODEL = ["--model", "/nonexistent/model-dir"]  # loading it would fail: an error about the data proves order


def test_invalid_utf8_in_a_data_file_names_file_and_line(tmp_path):
    path = _write(tmp_path / "d.jsonl", b'{"question": "1+1", "answer": "#### 2"}\n{"question": "\xff"}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:2: not valid UTF-8"):
        read_jsonl(path, ["question"])


@pytest.mark.parametrize("content", [None, "", "\n\n"])
def test_missing_or_empty_data_file_is_reported_before_the_model_loads(tmp_path, capsys, content):
    data = tmp_path / "d.jsonl"
    if content is not None:
        data.write_text(content)
    for command in (["evaluate", "--split", "test"], ["select-actions", "--split", "test"]):
        code = main([*command, "--task", "gsm8k", "--data", f"test={data}", *NO_MODEL, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and str(data) in err and "nonexistent" not in err, err


@pytest.mark.parametrize("value", ["0", "-3"])
def test_max_problems_must_be_positive(tmp_path, capsys, value):
    for command in ("evaluate", "select-actions"):
        code = main([command, "--max-problems", value, *NO_MODEL, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and "--max-problems" in err and "nonexistent" not in err, err


# ---------------------------------------------------------------- outputs: checked before any work


def test_evaluate_refuses_a_finished_evaluation_without_force(tmp_path, capsys):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "results.json").write_text("{}")
    assert main(["evaluate", *NO_MODEL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and "nonexistent" not in err
    # with --force the pre-flight passes and the run goes on to load the model (which fails here)
    assert main(["evaluate", *NO_MODEL, "--out", str(out), "--force"]) == 2
    assert "nonexistent" in capsys.readouterr().err
    assert (out / "results.json").read_text() == "{}"


@pytest.mark.parametrize("command", ["evaluate", "select-actions", "train-token", "train-sequence", "demo"])
def test_out_naming_a_file_fails_before_any_work(tmp_path, capsys, command):
    out = _write(tmp_path / "results.txt", "not a directory")
    assert main([command, *NO_MODEL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and "Traceback" not in err and "nonexistent" not in err, err


# ---------------------------------------------------------------- adapter files


def _saved_adapter(directory, lm, **overrides):
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=8, width=8))
    actions = ActionSet(PRESETS["math-token"]).to_json()
    config = AdapterConfig(kind="token", policy=asdict(policy.config), actions=actions, base_model="tiny",
                           base_fingerprint=lm.fingerprint(), token_budget=8, **overrides)
    save_adapter(directory, policy, config)
    return directory


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    path.write_text(json.dumps(edit(data)))


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda d: [d], "JSON object"),
        (lambda d: {k: v for k, v in d.items() if k != "actions"}, "missing: ['actions']"),
        (lambda d: {**d, "colour": "red"}, "unknown: ['colour']"),
        (lambda d: {**d, "policy": {**d["policy"], "hidden_size": 99}}, "base_fingerprint.hidden_size"),
        (lambda d: {**d, "policy": {**d["policy"], "num_actions": 3}}, "3 outputs but 4 actions"),
        (lambda d: {**d, "actions": [{"temperature": "hot"}] * 4}, "temperature"),
        (lambda d: {**d, "policy": {**d["policy"], "depth": 2}}, "token policy"),
    ],
)
def test_bad_adapter_json_is_one_line_naming_the_file(tmp_path, tiny_lm, edit, expected):
    directory = _saved_adapter(tmp_path / "a", tiny_lm)
    _edit_json(directory / "adapter.json", edit)
    with pytest.raises(ValueError) as err:
        load_adapter(directory)
    message = str(err.value)
    assert str(directory / "adapter.json") in message and expected in message and "\n" not in message


def test_truncated_or_mismatched_weights_are_one_line_naming_the_file(tmp_path, tiny_lm):
    directory = _saved_adapter(tmp_path / "a", tiny_lm)
    weights = directory / "adapter.safetensors"
    full = weights.read_bytes()
    weights.write_bytes(full[: len(full) // 2])
    with pytest.raises(ValueError, match="adapter.safetensors.*truncated or corrupt"):
        load_adapter(directory)
    other = _saved_adapter(tmp_path / "b", tiny_lm)
    _edit_json(other / "adapter.json", lambda d: {**d, "policy": {**d["policy"], "width": 16}})
    with pytest.raises(ValueError, match="does not fit the policy"):
        load_adapter(other)


def test_bad_adapter_through_the_cli_is_one_line(tmp_path, tiny_model_dir, capsys):
    directory = _saved_adapter(tmp_path / "a", make_tiny_lm())
    _edit_json(directory / "adapter.json", lambda d: [d])
    code = main(["evaluate", "--model", str(tiny_model_dir), "--adapter", str(directory), "--max-problems", "1",
                 "--out", str(tmp_path / "eval"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "adapter.json" in err


def test_lm_dtype_is_recorded_old_files_load_and_a_mismatch_warns_once(tmp_path, tiny_lm):
    directory = _saved_adapter(tmp_path / "a", tiny_lm)
    assert load_adapter(directory)[1].lm_dtype == "float32"
    # without lm_dtype (and without a dtype in the fingerprint) it loads with lm_dtype None
    _edit_json(directory / "adapter.json", lambda d: {**{k: v for k, v in d.items() if k != "lm_dtype"},
                                                      "base_fingerprint": {"hidden_size": tiny_lm.hidden_size}})
    assert load_adapter(directory, tiny_lm)[1].lm_dtype is None
    trained_in_bf16 = _saved_adapter(tmp_path / "b", tiny_lm, lm_dtype="bfloat16")
    with pytest.warns(UserWarning, match="bfloat16.*float32"):
        load_adapter(trained_in_bf16, tiny_lm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_adapter(trained_in_bf16, tiny_lm)  # once is enough


# ---------------------------------------------------------------- select-actions: the outcome table's header


def _select_args(model_dir, out, *extra):
    return ["select-actions", "--model", str(model_dir), "--task", "arithmetic", "--pool", "mix",
            "--pool-subsample", "2", "--k", "1", "--samples", "1", "--max-problems", "2", "--token-budget", "2",
            "--no-progress", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def selected(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("select")
    assert main(_select_args(tiny_model_dir, out)) == 0
    return out


def test_select_actions_header_records_what_determines_an_outcome(selected):
    header = json.loads((selected / "outcomes.jsonl").read_text().splitlines()[0])["header"]
    assert header["data"]["split"] == "validation" and len(header["data"]["digest"]) == 64
    assert {"system_prompt", "prompts", "cot_ratio", "token_budget", "seed", "samples", "model"} <= set(header)


@pytest.mark.parametrize(
    "extra, field",
    [(["--system-prompt", "Answer with a number only."], "system_prompt"), (["--cot-ratio", "0.5"], "cot_ratio"),
     (["--seed", "1"], "seed"), (["--samples", "2"], "samples")],
)
def test_select_actions_refuses_to_resume_with_other_settings(tiny_model_dir, selected, tmp_path, capsys,
                                                              extra, field):
    out = tmp_path / "sel"
    out.mkdir()
    (out / "outcomes.jsonl").write_bytes((selected / "outcomes.jsonl").read_bytes())
    assert main(_select_args(tiny_model_dir, out, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert f"{field}: stored" in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert main(_select_args(tiny_model_dir, out, "--max-problems", "3")) == 0  # more of the same split resumes


def test_outcome_table_refuses_other_data_under_the_same_ids(tiny_lm, tmp_path):
    """Problem ids are positional for generated and file tasks: the same ids with other questions
    (another --data file) must not reuse the stored outcomes."""
    task = get_task("arithmetic")
    problems = task.load("validation")[:2]
    others = [replace(p, question=p.question + " ") for p in task.load("validation")[2:4]]
    others = [replace(o, id=p.id) for o, p in zip(others, problems)]
    settings = dict(samples=1, token_budget=2, seed=0, progress=False, stop_at_answer=False)
    evaluate_pool(tiny_lm, task, problems, [GREEDY], table_path=tmp_path / "t.jsonl", **settings)
    with pytest.raises(ValueError, match="data: stored"):
        evaluate_pool(tiny_lm, task, others, [GREEDY], table_path=tmp_path / "t.jsonl", **settings)


# ---------------------------------------------------------------- offline replay checks the table


def test_replay_refuses_a_table_decoded_under_other_settings(selected, tiny_model_dir):
    tiny_lm = load_frozen_lm(ModelSpec(str(tiny_model_dir)))  # the LM the table was decoded with
    task, table = get_task("arithmetic"), str(selected / "outcomes.jsonl")
    action_set = ActionSet(load_action_set(selected / "actions.json"))
    ok = SequenceTrainConfig(actions=str(selected / "actions.json"), replay=table, token_budget=2, seed=5)
    assert reward_source(ok, task, action_set, lm=tiny_lm).offline  # another training seed is fine without CoT
    for change, field in [({"token_budget": 3}, "token_budget"), ({"cot_ratio": 0.3}, "cot_ratio")]:
        with pytest.raises(ValueError, match=f"{field}: stored.*offline replay refused"):
            reward_source(replace(ok, **change), task, action_set, lm=tiny_lm)
    with pytest.raises(ValueError, match="model: stored"):
        reward_source(ok, task, action_set, lm=make_tiny_lm(hidden_size=48))
    with pytest.raises(ValueError, match="task: stored"):
        reward_source(ok, get_task("pyfunc"), action_set, lm=tiny_lm)
    with pytest.raises(ValueError, match="prompts: stored"):
        reward_source(ok, get_task("arithmetic", system_prompt="Be brief."), action_set, lm=tiny_lm)


def test_replay_through_the_cli_refuses_a_mismatch_and_records_lm_dtype(tiny_model_dir, selected, tmp_path, capsys):
    args = ["train-sequence", "--force", "--model", str(tiny_model_dir), "--task", "arithmetic", "--replay",
            str(selected / "outcomes.jsonl"), "--actions", str(selected / "actions.json"), "--steps", "1",
            "--prompts-per-step", "2", "--parallel-budgets", "1", "--val-problems", "2"]
    assert main([*args, "--token-budget", "3", "--out", str(tmp_path / "bad")]) == 2
    assert "token_budget: stored 2 vs now 3" in capsys.readouterr().err
    assert main([*args, "--token-budget", "2", "--out", str(tmp_path / "seq")]) == 0
    assert load_adapter(tmp_path / "seq")[1].lm_dtype == AUTO_DTYPE


# ---------------------------------------------------------------- --resume compares the configs


def test_check_resume_classifies_every_change():
    saved = asdict(TokenTrainConfig(steps=4))
    assert check_resume(saved, TokenTrainConfig(steps=4), step=4) == []
    assert check_resume(saved, TokenTrainConfig(steps=8, val_every=3), step=4) == ["steps 4 -> 8", "val_every 10 -> 3"]
    for change in ({"lr": 0.1}, {"token_budget": 16}, {"actions": "mix"}, {"seed": 1}, {"group_size": 4}):
        with pytest.raises(ValueError, match=f"{next(iter(change))} .* would change the run"):
            check_resume(saved, TokenTrainConfig(steps=4, **change), step=4)
    with pytest.raises(ValueError, match="steps 2 < the 3 steps already done"):
        check_resume(saved, TokenTrainConfig(steps=2), step=3)


def test_resume_refuses_changed_options_and_allows_more_steps(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "tok"
    args = ["train-token", "--force", "--model", str(tiny_model_dir), "--task", "arithmetic", "--token-budget", "2",
            "--val-problems", "2", "--max-train-prompts", "4", "--prompts-per-step", "1", "--group-size", "2",
            "--filter-samples", "0", "--out", str(out)]
    assert main([*args, "--steps", "1"]) == 0
    capsys.readouterr()
    for change in (["--lr", "0.1"], ["--token-budget", "3"], ["--actions", "mix"], ["--seed", "2"]):
        assert main([*args, "--steps", "1", *change, "--resume"]) == 2
        err = capsys.readouterr().err
        assert "would change the run" in err and "Traceback" not in err
    assert main([*args, "--steps", "2", "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2] or steps == [0, 1, 2]
    assert load_adapter(out)[1].lm_dtype == AUTO_DTYPE


def test_damaged_checkpoint_is_one_line(tmp_path, capsys):
    (tmp_path / "checkpoint.pt").write_bytes(b"PK\x03\x04 torn")
    code = main(["train-token", *NO_MODEL, "--out", str(tmp_path), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "checkpoint.pt has no readable checksum" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("config_cls", [SequenceTrainConfig, TokenTrainConfig])
@pytest.mark.parametrize(
    "change",
    [{"token_budget": 0}, {"lr": 0.0}, {"lr": math.inf}, {"entropy_coef": math.nan}, {"ema_decay": 1.0},
     {"policy_temperature": 0.0}, {"max_train_prompts": 0}, {"val_problems": 0}, {"cot_ratio": 1.5}],
)
def test_trainer_configs_reject_values_they_used_to_accept(config_cls, change):
    with pytest.raises(ValueError, match=next(iter(change))):
        config_cls(**change)


def test_bad_trainer_value_through_the_cli_before_the_model_loads(tmp_path, capsys):
    assert main(["train-token", *NO_MODEL, "--lr", "nan", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "lr must be" in err and "nonexistent" not in err
