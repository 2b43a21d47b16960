"""The generator an ``Adapter`` returns: load/save round trip, sequence and token adapters, parallel budget, merged
batches, mismatch errors, and the ``generate`` CLI end to end (in-process)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.policies.networks import (
    AdapterConfig,
)
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.generator import Generation

PROMPTS = ["What is 2+3?", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("adapters")
    base = save_tiny_base(tiny_lm, root / "base")
    return {kind: make_adapter(root / kind, tiny_lm, kind, base_model=str(base)) for kind in ("sequence", "token")}


def test_from_pretrained_loads_the_base_model_and_round_trips(adapters, tiny_lm, tmp_path):
    adapter = Adapter.from_pretrained(adapters["token"], lm="base")  # base model read from config.base_model
    gen = adapter.generator()
    assert gen.kind == "token" and gen.lm is not tiny_lm and gen.lm.hidden_size == tiny_lm.hidden_size
    assert gen.lm is adapter.lm and gen.policy is adapter.policy
    assert gen.default_token_budget == 128  # every adapter, whatever its training budget (8 here)
    adapter.save_pretrained(tmp_path / "copy")
    again = Adapter.from_pretrained(tmp_path / "copy", lm=gen.lm).generator()
    for k, v in gen.policy.state_dict().items():
        assert torch.equal(v, again.policy.state_dict()[k])
    assert again.config == gen.config
    a = gen.generate(PROMPTS, token_budget=6, parallel_budget=2, seed=5)
    b = again.generate(PROMPTS, token_budget=6, parallel_budget=2, seed=5)
    assert [g.completions for g in a] == [g.completions for g in b]
    assert [g.token_actions for g in a] == [g.token_actions for g in b]


def test_sequence_adapter_picks_one_action_per_prompt(adapters, tiny_lm):
    gen = Adapter.from_pretrained(adapters["sequence"], lm=tiny_lm).generator()
    outs = gen.generate(PROMPTS, token_budget=6, parallel_budget=3, seed=1)
    assert len(outs) == 2 and all(isinstance(g, Generation) for g in outs)
    for g, prompt in zip(outs, PROMPTS):
        assert g.prompt == prompt and g.kind == "sequence" and len(g.completions) == 3
        assert g.action in ActionSet(PRESETS["math"]).names and g.actions == g.action
        assert g.action_index == max(range(len(g.action_probs)), key=g.action_probs.__getitem__)  # argmax by default
        assert abs(sum(g.action_probs) - 1) < 1e-5 and g.token_actions is None
        assert all(1 <= n <= 6 for n in g.completion_tokens) and set(g.finish_reasons) <= {"stop", "length"}
        assert g.action_counts() == [{g.action: n} for n in g.completion_tokens]
    # The budget B is an input of the policy: the probabilities change with it.
    b1 = gen.generate(PROMPTS[0], token_budget=2, parallel_budget=1)[0]
    assert b1.action_probs != outs[0].action_probs
    # A sampling policy draws reproducibly from the seed.
    draws = [gen.generate(PROMPTS, token_budget=2, seed=s, deterministic_policy=False) for s in range(8)]
    assert len({d[i].action_index for d in draws for i in range(2)}) > 1  # an untrained policy is spread out
    assert (
        draws[0][0].action_index
        == gen.generate(PROMPTS, token_budget=2, seed=0, deterministic_policy=False)[0].action_index
    )
    json.dumps([g.to_dict() for g in outs])  # JSON-able


def test_token_adapter_records_actions_per_token(adapters, tiny_lm):
    gen = Adapter.from_pretrained(adapters["token"], lm=tiny_lm).generator()
    outs = gen.generate(PROMPTS, token_budget=8, parallel_budget=2, seed=3, deterministic_policy=False)
    for g in outs:
        assert g.kind == "token" and g.action is None and len(g.completions) == 2
        assert [len(a) for a in g.token_actions] == g.completion_tokens
        assert all(name in g.action_names for row in g.actions for name in row)
        assert [sum(c.values()) for c in g.action_counts()] == g.completion_tokens
    used = {a for g in outs for row in g.token_actions for a in row}
    assert len(used) > 1  # an untrained sampling policy switches actions
    again = gen.generate(PROMPTS, token_budget=8, parallel_budget=2, seed=3, deterministic_policy=False)
    assert [g.completions for g in again] == [g.completions for g in outs]


def test_parallel_budget_and_seeds(adapters, tiny_lm):
    gen = Adapter.from_pretrained(adapters["sequence"], lm=tiny_lm).generator()
    outs = gen.generate(["Compute 17*23 now, please."], token_budget=8, parallel_budget=4, seed=0)
    assert len(outs[0].completions) == 4
    if not gen.action_set.actions[outs[0].action_index].is_greedy:
        assert len(set(outs[0].completions)) > 1  # B samples, different seeds per row
    other = gen.generate(["Compute 17*23 now, please."], token_budget=8, parallel_budget=4, seed=1)
    assert other[0].completions != outs[0].completions or gen.action_set.actions[outs[0].action_index].is_greedy


def test_merged_calls_equal_separate_calls(adapters, tiny_lm):
    """What the server relies on: merging prepared prompts of several requests changes no result."""
    gen = Adapter.from_pretrained(adapters["token"], lm=tiny_lm).generator(max_batch_rows=3)
    a = gen.prepare(PROMPTS, token_budget=5, parallel_budget=2, seed=7)
    b = gen.prepare(["x"], token_budget=8, parallel_budget=1, seed=9)
    merged = gen.run(a + b)  # 5 rows, chunked at 3
    separate = gen.run(a) + gen.run(b)
    assert [g.completions for g in merged] == [g.completions for g in separate]
    assert [g.token_actions for g in merged] == [g.token_actions for g in separate]
    assert max(merged[2].completion_tokens) <= 8 and max(merged[0].completion_tokens) <= 5


def test_mismatched_model_and_bad_inputs_fail_clearly(tmp_path, adapters, tiny_lm):
    from conftest import make_tiny_lm

    wider = make_tiny_lm(hidden_size=48)
    with pytest.raises(ValueError, match="hidden_size"):
        Adapter.from_pretrained(adapters["sequence"], lm=wider).generator()
    # A tokenizer with another vocabulary is refused as well.
    make_adapter(tmp_path / "vocab", tiny_lm, "token")
    cfg = json.loads((tmp_path / "vocab" / "adapter.json").read_text())
    cfg["base_fingerprint"]["vocab_size"] += 1
    (tmp_path / "vocab" / "adapter.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="vocab_size"):
        Adapter.from_pretrained(tmp_path / "vocab", lm=tiny_lm).generator()
    gen = Adapter.from_pretrained(adapters["token"], lm=tiny_lm).generator()
    with pytest.raises(ValueError, match="token_budget"):
        gen.generate("hi", token_budget=0)
    with pytest.raises(ValueError, match="parallel_budget"):
        gen.generate("hi", parallel_budget=0)
    with pytest.raises(ValueError, match="chat message"):
        gen.generate([[{"role": "user"}]])
    with pytest.raises(ValueError, match="context"):
        gen.generate("y" * 600, token_budget=4)  # the tiny model has 512 positions
    with pytest.raises(FileNotFoundError):
        Adapter.from_pretrained(tmp_path / "missing")
    with pytest.raises(ValueError, match="lm='base'"):
        Adapter.from_pretrained(adapters["token"]).generator()  # no LM bound


@pytest.fixture
def cli_main(monkeypatch):
    """``decoding_adapters.cli.main`` with only the sub-commands whose modules exist (others are
    written concurrently), so this test exercises the real parser and error handling."""
    from decoding_adapters import cli

    present = {k: v for k, v in cli.COMMANDS.items() if importlib.util.find_spec(v[0]) is not None}
    monkeypatch.setattr(cli, "COMMANDS", present)
    return cli.main


def test_generate_cli(adapters, capsys, cli_main):
    main = cli_main

    args = [
        "generate",
        "--adapter",
        str(adapters["token"]),
        "What is 2+3?",
        "Hi",
        "--token-budget",
        "6",
        "--parallel-budget",
        "2",
        "--seed",
        "4",
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "=== prompt 2: Hi" in text and "completion 2/2" in text and "actions:" in text
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["adapter"]["kind"] == "token" and len(doc["generations"]) == 2
    g = doc["generations"][0]
    assert len(g["completions"]) == 2 and len(g["token_actions"][0]) == g["completion_tokens"][0]

    assert main(["generate", "--adapter", str(adapters["sequence"]), "Hi", "--token-budget", "4", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["generations"][0]
    assert g["kind"] == "sequence" and g["action"] in g["action_names"]
    assert main(["generate", "--adapter", str(adapters["sequence"]), "Hi", "--token-budget", "0"]) == 2  # clear error
    assert "token_budget" in capsys.readouterr().err


def test_evaluated_mode_is_the_served_default(adapters, tiny_lm, tmp_path):
    """One policy_mode, stored in the adapter, is the default of evaluate, generate, serve, Adapter
    and its generator: token adapters sample (what evaluation measures), sequence adapters take the
    argmax."""
    from decoding_adapters.evaluation import adapter_method
    from decoding_adapters.policies.networks import default_policy_mode, load_adapter
    from decoding_adapters.serving.adapter import Adapter
    from decoding_adapters.serving.server import BatchingWorker, ServerLimits

    assert (default_policy_mode("token"), default_policy_mode("sequence")) == ("sample", "argmax")
    for kind, mode in (("token", "sample"), ("sequence", "argmax")):
        _, config = load_adapter(adapters[kind])
        assert config.policy_mode == mode and json.loads((adapters[kind] / "adapter.json").read_text())[
            "policy_mode"] == mode
        gen = Adapter.from_pretrained(adapters[kind], lm=tiny_lm).generator()
        assert gen.policy_mode == mode and gen.deterministic() == (mode == "argmax")
        assert BatchingWorker(gen, ServerLimits()).deterministic_policy == (mode == "argmax")
        assert Adapter.from_pretrained(adapters[kind], lm=tiny_lm).deterministic() == (mode == "argmax")
        assert adapter_method(adapters[kind], tiny_lm).policy_mode == mode
    gen = Adapter.from_pretrained(adapters["token"], lm=tiny_lm).generator()
    default = gen.generate(PROMPTS, token_budget=8, parallel_budget=2, seed=3)
    sampled = gen.generate(PROMPTS, token_budget=8, parallel_budget=2, seed=3, deterministic_policy=False)
    argmax = gen.generate(PROMPTS, token_budget=8, parallel_budget=2, seed=3, deterministic_policy=True)
    assert [g.token_actions for g in default] == [g.token_actions for g in sampled]
    assert [g.token_actions for g in default] != [g.token_actions for g in argmax]
    # an adapter.json without the field loads with its kind's default; a bad mode is refused
    old = json.loads((adapters["token"] / "adapter.json").read_text())
    old.pop("policy_mode")
    assert AdapterConfig.from_dict(old).policy_mode == "sample"
    with pytest.raises(ValueError, match="policy_mode"):
        AdapterConfig.from_dict({**old, "policy_mode": "greedy"})
