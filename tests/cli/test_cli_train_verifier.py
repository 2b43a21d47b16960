"""train-verifier and rules --verifier end to end on stored tables: the verifier is written and
loadable on its own with its quality, and the rules that read it are tuned beside the plain ones."""

import json

from decoding_adapters.cli import main
from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.fixed_rules import VERIFIER_RULES
from decoding_adapters.policies.verifier import load_verifier


def test_train_verifier_then_rules_read_it(tmp_path, capsys):
    for name, seed, n in (("train", 1, 60), ("val", 2, 40), ("test", 3, 30)):
        synthetic_sample_table(n, samples=4, seed=seed, hidden_size=6).save(tmp_path / name)
    out = tmp_path / "verifier"
    assert main(["train-verifier", "--table", str(tmp_path / "train"), "--val-table", str(tmp_path / "val"),
                 "--out", str(out), "--steps", "5", "--folds", "2"]) == 0
    verifier, meta = load_verifier(out)
    assert verifier.config.features == ("confidence", "hidden") and meta["training"]["steps"] == 5
    quality = json.loads((out / "quality.json").read_text())["quality"]
    assert set(quality) == {"train (cross-fitted)", "validation"} and 0 <= quality["validation"]["all"]["auc"] <= 1
    assert "AUC" in capsys.readouterr().out
    curves = tmp_path / "curves"
    assert main(["rules", "--validation-table", str(tmp_path / "val"), "--table", str(tmp_path / "test"),
                 "--out", str(curves), "--rules", "self_consistency,cges", "--verifier-dir", str(out)]) == 0
    data = json.loads((curves / "curves.json").read_text())
    assert set(data["rules"]) == {"self_consistency", "cges", *VERIFIER_RULES}
    assert all(data["rules"][r].get("reads_verifier") for r in VERIFIER_RULES)
    assert not data["rules"]["cges"].get("reads_verifier")
    assert data["verifier"]["quality"]["test"]["all"]["attempts"] > 0
