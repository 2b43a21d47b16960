"""The abandon rule through the command line: ``train-attempt --checkpoints`` builds tables with
checkpoints, ``attach-abandon`` fits a rule for one of its adapters and writes it into the adapter,
and ``generate --json`` then lists each attempt's arm, tokens and where it was cut."""

import dataclasses
import json

import pytest

from decoding_adapters.cli import main
from decoding_adapters.evaluation.sample_table import SampleTable
from decoding_adapters.policies.abandon import load_abandon_rule


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("attach") / "attempt"
    assert main(["train-attempt", "--model", str(tiny_model_dir), "--task", "arithmetic", "--token-budget", "8",
                 "--out", str(out), "--train-problems", "4", "--val-problems", "3", "--samples", "2",
                 "--holdout", "0", "--prices", "0.05", "--steps", "2", "--val-every", "1", "--checkpoints", "2",
                 "--no-stop-at-answer", "--rules", "self_consistency"]) == 0
    return out


def test_attach_abandon_writes_a_rule_generate_uses(trained, tiny_model_dir, capsys):
    tables, adapter = trained / "tables", trained / "policies" / "price-0.05-seed-0"
    assert SampleTable.load(tables / "train").checkpoint_tokens == [2, 4, 6]
    args = ["attach-abandon", "--adapter", str(adapter), "--table", str(tables / "train"),
            "--val-table", str(tables / "validation"), "--steps", "3"]
    capsys.readouterr()
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rule = load_abandon_rule(adapter)
    assert rule.every == printed["every"] == 2 and list(rule.thresholds) == printed["thresholds"]
    assert printed["tokens"] <= printed["tokens_without"]
    card = (adapter / "README.md").read_text()
    assert "## Abandon rule" in card and "at every 2 tokens" in card and "tokens per problem" in card
    assert main(args) == 2  # a rule already there is kept unless --force
    assert "already carries an abandon rule" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    capsys.readouterr()
    assert main(["generate", "--adapter", str(adapter), "--model", str(tiny_model_dir), "--token-budget", "8",
                 "--json", "What is 2+3?"]) == 0
    generation = json.loads(capsys.readouterr().out)["generations"][0]
    records = generation["attempt_records"]
    assert [r["arm"] for r in records] == generation["attempt_actions"]
    assert all(set(r) == {"arm", "tokens", "cut_at"} for r in records)
    assert generation["attempt_cut_at"] == [r["cut_at"] for r in records]
    assert (adapter / "README.md").read_text().count("## Abandon rule") == 1  # --force rewrote the card, once


def test_a_card_names_no_damaged_abandon_rule(trained, tmp_path):
    from decoding_adapters.policies.adapter_files import read_adapter_config
    from decoding_adapters.policies.model_card import render_model_card

    adapter = trained / "policies" / "price-0.05-seed-0"
    copy = tmp_path / "adapter"
    copy.mkdir()
    (copy / "abandon.json").write_text('{"format": "decoding-adapters/abandon", "every": -1, "thresholds": []}')
    assert "## Abandon rule" not in render_model_card(read_adapter_config(adapter), copy)
    # a valid rule whose free-form training record is not an object: the section, without its figures
    rule = json.loads((adapter / "abandon.json").read_text())
    for training in ("fitted by hand", {"validation": {"accuracy": "high"}}):
        (copy / "abandon.json").write_text(json.dumps({**rule, "training": training}))
        card = render_model_card(read_adapter_config(adapter), copy)
        assert "## Abandon rule" in card and "On its validation table" not in card


def test_tables_without_checkpoints_or_of_another_stop_are_refused(trained, tmp_path, capsys):
    adapter = trained / "policies" / "price-0.05-seed-0"
    train = SampleTable.load(trained / "tables" / "train")
    header = {k: v for k, v in train.header.items() if k != "checkpoints"}
    dataclasses.replace(train, header=header, prefix_confidence=None, prefix_hidden=None).save(tmp_path / "plain")
    dataclasses.replace(train, header={**train.header, "stop_at_answer": True}).save(tmp_path / "stopped")
    args = ["attach-abandon", "--adapter", str(adapter), "--val-table", str(trained / "tables" / "validation"),
            "--force", "--table"]
    assert main([*args, str(tmp_path / "plain")]) == 2
    assert "stores no checkpoints" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "stopped")]) == 2
    assert "end at their first answer, the adapter's do not" in capsys.readouterr().err
