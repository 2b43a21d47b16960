"""An attempt adapter is refused at load, in one line, when its state lattice is over the limit or
its policy over the parameter cap (never on every request, never after allocating it), and a
served adapter builds its lattice once, not per request."""

from __future__ import annotations

import json
import random
from dataclasses import asdict

import pytest
import torch

from adapter_helpers import save_tiny_base
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.policies import attempt
from decoding_adapters.policies.attempt import (
    MAX_LATTICE_STATES,
    AttemptLattice,
    AttemptPolicy,
    AttemptPolicyConfig,
    lattice_states,
    save_attempt_adapter,
)
from decoding_adapters.policies.bounds import MAX_POLICY_PARAMETERS, _parameters
from decoding_adapters.policies.networks import AdapterConfig
from decoding_adapters.serving.adapter import Adapter

ARMS = [GREEDY, DecodingAction(temperature=0.5), DecodingAction(temperature=0.7)]


def _config(**fields) -> AttemptPolicyConfig:
    return AttemptPolicyConfig(tuple(a.name for a in ARMS), 0, (1, 3, 3), tuple(CONFIDENCE_FEATURES),
                               max_attempts=4, token_budget=6, **fields)


@pytest.fixture()
def adapter_dir(tmp_path, tiny_lm):
    torch.manual_seed(0)
    base = str(save_tiny_base(tiny_lm, tmp_path / "base"))
    return save_attempt_adapter(tmp_path / "attempt", AttemptPolicy(_config()), [a.to_dict() for a in ARMS],
                                base_model=base, task="arithmetic")


def _edit_policy(directory, **fields) -> None:
    path = directory / "adapter.json"
    data = json.loads(path.read_text())
    data["policy"].update(fields)
    path.write_text(json.dumps(data))


def test_the_lattice_size_is_counted_without_enumerating_it():
    rng = random.Random(0)
    for _ in range(200):
        arms = rng.randint(1, 4)
        distinct = [rng.randint(1, 5) for _ in range(arms)]
        first, most = rng.randrange(arms), rng.randint(1, 12)
        assert lattice_states(distinct, first, most) == len(AttemptLattice(distinct, first, most))
    assert lattice_states([1, 256, 256], 0, 256) == MAX_LATTICE_STATES + 1  # over: saturated, at once


def test_a_lattice_over_the_limit_is_refused_at_load_in_one_line(adapter_dir, tiny_lm):
    _edit_policy(adapter_dir, distinct=[1, 256, 256], max_attempts=256)
    with pytest.raises(ValueError, match="50,000 lattice states") as err:
        Adapter.from_pretrained(adapter_dir, lm=tiny_lm)
    assert "\n" not in str(err.value) and "max_attempts" in str(err.value)


def test_a_served_adapter_builds_its_lattice_once(adapter_dir, tiny_lm, monkeypatch):
    built = []

    class Counted(AttemptLattice):
        def __init__(self, *args, **kwargs):
            built.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(attempt, "AttemptLattice", Counted)
    gen = Adapter.from_pretrained(adapter_dir, lm=tiny_lm).generator()
    first = gen.generate(["What is 2+3?"], token_budget=3)
    second = gen.generate(["What is 2+3?"], token_budget=3)
    assert first[0].to_dict() == second[0].to_dict()
    assert len(built) == 1


def test_the_parameter_cap_counts_the_attempt_policy():
    small = asdict(_config(hidden_size=16, features=("confidence", "hidden")))
    actual = sum(p.numel() for p in AttemptPolicy(_config(hidden_size=16, features=("confidence", "hidden")))
                 .parameters())
    assert actual <= _parameters(json.loads(json.dumps(small)), per_token=False) <= 2 * actual
    for wide in ({"width": 16_384}, {"hidden_size": 65_536, "hidden_proj": 4096}):
        data = {"kind": "attempt", "policy": {**json.loads(json.dumps(small)), **wide},
                "actions": [a.to_dict() for a in ARMS], "base_model": "tiny", "task": "arithmetic"}
        with pytest.raises(ValueError, match=f"over the {MAX_POLICY_PARAMETERS:,}"):
            AdapterConfig.from_dict(data)  # before any tensor of it is allocated
