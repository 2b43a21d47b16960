"""An abandon rule saved beside an adapter (``abandon.json`` + ``abandon.safetensors``) loads back to
the same scores; a damaged or inconsistent pair is refused in one line naming the file."""

import json

import pytest
import torch

from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.policies.abandon import (
    ABANDON_JSON,
    ABANDON_WEIGHTS,
    AbandonRule,
    load_abandon_rule,
    save_abandon_rule,
)
from decoding_adapters.policies.verifier import Verifier, VerifierConfig

BUDGET, EVERY = 10, 3  # checkpoints at 3, 6 and 9 tokens


def _rule(hidden: int = 4) -> AbandonRule:
    torch.manual_seed(0)
    config = VerifierConfig(tuple(CONFIDENCE_FEATURES), ("confidence", "hidden"), hidden, 2, 8, BUDGET)
    return AbandonRule(Verifier(config).eval(), EVERY, (0.5, 0.0, 0.25), tuple(CONFIDENCE_FEATURES))


def _readings(rows: int = 6, hidden: int = 4):
    torch.manual_seed(1)
    return torch.randn(rows, len(CONFIDENCE_FEATURES)), torch.randn(rows, hidden)


def test_a_saved_rule_loads_back_with_the_same_cuts(tmp_path):
    rule = _rule()
    save_abandon_rule(tmp_path, rule, training={"tables": "t"})
    loaded = load_abandon_rule(tmp_path)
    assert (loaded.every, loaded.thresholds, loaded.confidence_names) == (EVERY, rule.thresholds, rule.confidence_names)
    conf, hid = _readings()
    for c in range(3):
        assert torch.equal(loaded.scores(c, conf, hid), rule.scores(c, conf, hid))
        assert loaded.cut(c, conf, hid) == rule.cut(c, conf, hid)
    assert load_abandon_rule(tmp_path / "nothing-here") is None  # an adapter without a rule


def _damage(directory, **fields):
    meta = json.loads((directory / ABANDON_JSON).read_text())
    for key, value in fields.items():
        if "." in key:
            outer, inner = key.split(".")
            meta[outer][inner] = value
        else:
            meta[key] = value
    (directory / ABANDON_JSON).write_text(json.dumps(meta))


@pytest.mark.parametrize("fields, message", [
    ({"thresholds": [0.5, 0.1]}, "2 thresholds for 3 checkpoints"),
    ({"every": 0}, "every must be between 1"),
    ({"every": 10}, "below the token budget 10"),
    ({"every": "3"}, "every must be an integer"),
    ({"thresholds": [0.5, 2.0, 0.1]}, r"thresholds\[1\] must be in \[0, 1\]"),
    ({"format": "something-else"}, "not an abandon rule"),
    ({"verifier.width": 10**9}, "verifier.width must be between"),
    ({"verifier.hidden_size": 5}, "does not fit the prefix verifier"),
    ({"confidence_names": ["max_prob_mean"]}, "reads the confidence columns"),
])
def test_an_inconsistent_rule_is_refused_in_one_line(tmp_path, fields, message):
    save_abandon_rule(tmp_path, _rule())
    _damage(tmp_path, **fields)
    with pytest.raises(ValueError, match=message) as err:
        load_abandon_rule(tmp_path)
    assert "\n" not in str(err.value) and tmp_path.name in str(err.value)


def test_damaged_files_are_refused_in_one_line(tmp_path):
    save_abandon_rule(tmp_path, _rule())
    weights = tmp_path / ABANDON_WEIGHTS
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt") as err:
        load_abandon_rule(tmp_path)
    assert "\n" not in str(err.value)
    weights.unlink()
    with pytest.raises(ValueError, match="not found: the abandon rule is incomplete"):
        load_abandon_rule(tmp_path)
    weights.write_bytes(good)
    (tmp_path / ABANDON_JSON).write_text('{"format": "decoding-adapters/abandon", "every": NaN}')
    with pytest.raises(ValueError, match="NaN"):
        load_abandon_rule(tmp_path)
    (tmp_path / ABANDON_JSON).unlink()
    with pytest.raises(ValueError, match="has no abandon.json beside it"):
        load_abandon_rule(tmp_path)


def test_non_finite_weights_are_refused(tmp_path):
    rule = _rule()
    with torch.no_grad():
        rule.verifier.net[0].weight[0, 0] = float("nan")
    save_abandon_rule(tmp_path, rule)
    with pytest.raises(ValueError, match="NaN or infinite"):
        load_abandon_rule(tmp_path)


def test_an_inconsistent_rule_is_not_saved(tmp_path):
    with pytest.raises(ValueError, match="1 thresholds for 3 checkpoints"):
        save_abandon_rule(tmp_path, _rule().with_thresholds([0.5]))
    assert not (tmp_path / ABANDON_JSON).exists()
