"""The verifier on its own: its config is checked, an attempt without an answer scores 0, and it
round-trips through verifier.safetensors + verifier.json with the same scores."""

import json

import pytest
import torch

from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.verifier import Verifier, VerifierConfig, load_verifier, save_verifier


def _verifier(table) -> Verifier:
    torch.manual_seed(0)
    config = VerifierConfig(tuple(table.confidence_names), ("confidence", "answer_probs", "hidden"),
                            hidden_size=table.hidden.shape[-1], hidden_proj=3, width=5, token_budget=64)
    verifier = Verifier(config)
    verifier.set_standardisation(verifier.inputs_from_table(table), table.distinct)
    return verifier.eval()


def test_config_is_checked():
    with pytest.raises(ValueError, match="hidden_size"):
        VerifierConfig(("max_prob_mean",), ("hidden",))
    with pytest.raises(ValueError, match="unknown"):
        VerifierConfig(("max_prob_mean",), ("votes",))


def test_scores_are_probabilities_and_zero_without_an_answer():
    table = synthetic_sample_table(30, samples=4, hidden_size=6, seed=1)
    scores = _verifier(table).score_table(table)
    assert scores.shape == table.shape
    none = torch.as_tensor(table.answers < 0)
    assert none.any() and (scores[none] == 0).all()
    assert ((scores[~none] > 0) & (scores[~none] < 1)).all()


def test_save_and_load_give_the_same_scores(tmp_path):
    table = synthetic_sample_table(20, samples=3, hidden_size=6, seed=2)
    verifier = _verifier(table)
    save_verifier(tmp_path / "v", verifier, {"steps": 0})
    loaded, meta = load_verifier(tmp_path / "v")
    assert meta["training"] == {"steps": 0} and loaded.config == verifier.config
    assert torch.equal(loaded.score_table(table), verifier.score_table(table))
    assert json.loads((tmp_path / "v" / "verifier.json").read_text())["format"] == "decoding-adapters/verifier"
    with pytest.raises(FileNotFoundError):
        load_verifier(tmp_path)


def test_a_table_without_the_columns_it_reads_is_refused():
    table = synthetic_sample_table(10, samples=2, hidden_size=6)
    verifier = _verifier(table)
    with pytest.raises(ValueError, match="hidden"):
        verifier.score_table(synthetic_sample_table(10, samples=2, hidden_size=4))
