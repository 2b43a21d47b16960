"""Attempt adapters (the learned attempt policy and a fixed rule with no weights) everywhere an
adapter goes: ``Adapter.from_pretrained(...).generator()``, ``generate`` and the server (chat and
completions, streamed or not). The response's adapter field says how many attempts, with which
arms, and why it stopped."""

from __future__ import annotations

import json

import httpx
import pytest
import torch
from test_server import BackgroundServer

from adapter_helpers import save_tiny_base
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.policies.attempt import AttemptPolicy, AttemptPolicyConfig, save_attempt_adapter
from decoding_adapters.policies.kind_rule import save_rule_adapter
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ServerLimits, create_app

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

LIMITS = ServerLimits(max_tokens_limit=32, max_batch=8, max_prompt_chars=1000, max_queue=64, batch_wait_ms=5)
SAMPLER = DecodingAction(temperature=1.0)
ACTIONS = [GREEDY.to_dict(), SAMPLER.to_dict()]
BUDGET = 6


def _attempt_adapter(directory, stop_bias: float, base: str):
    """An untrained attempt policy whose stop logit (``stop_bias``) stops at once or never."""
    config = AttemptPolicyConfig(("greedy", SAMPLER.name), 0, (1, 3), tuple(CONFIDENCE_FEATURES),
                                 ("confidence", "agreement"), 3, token_budget=BUDGET, stop_bias=stop_bias)
    torch.manual_seed(0)
    return save_attempt_adapter(directory, AttemptPolicy(config), ACTIONS, base_model=base, task="arithmetic")


@pytest.fixture(scope="module")
def generators(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("attempts-served")
    base = str(save_tiny_base(tiny_lm, root / "base"))
    dirs = {
        "stops": _attempt_adapter(root / "stops", 50.0, base),
        "goes on": _attempt_adapter(root / "goes-on", -50.0, base),
        "confident": save_rule_adapter(root / "confident", "confidence_threshold",
                                       {"feature": "max_prob_mean", "threshold": -1e12, "redecodes": 2,
                                        "with_draft": False}, ACTIONS, task="arithmetic", token_budget=BUDGET),
        "sc3": save_rule_adapter(root / "sc3", "self_consistency", {"n": 3}, ACTIONS, task="arithmetic",
                                 token_budget=BUDGET),
    }
    return {name: Adapter.from_pretrained(d, lm=tiny_lm).generator() for name, d in dirs.items()}


def test_the_generator_makes_the_attempts_its_decider_asks_for(generators):
    prompts = ["What is 2+3?", "What is 7*6?"]
    stops = generators["stops"].generate(prompts, token_budget=BUDGET)
    assert [(g.decodes, g.stopped_by, g.attempt_actions) for g in stops] == [(1, "policy", ["greedy"])] * 2
    assert stops[0].kind == "attempt" and stops[0].action == "greedy" and len(stops[0].completions) == 1
    long = generators["goes on"].generate(prompts, token_budget=BUDGET)
    assert [(g.decodes, g.stopped_by) for g in long] == [(3, "budget")] * 2
    assert long[0].attempt_actions == ["greedy", SAMPLER.name, SAMPLER.name]
    assert long[0].attempt_tokens >= long[0].completion_tokens[0]
    # the first attempt is the stopped greedy whichever adapter makes it
    confident = generators["confident"].generate(prompts)
    assert [(g.decodes, g.stopped_by) for g in confident] == [(1, "confident")] * 2
    assert [g.completions for g in confident] == [g.completions for g in stops]
    sc = generators["sc3"].generate(prompts)
    assert [(g.decodes, g.stopped_by) for g in sc] == [(3, "budget")] * 2
    # a prompt's attempts do not depend on the other prompts of the call (its position and the seed key them)
    alone = generators["sc3"].generate(prompts[:1])[0]
    assert alone.completions == sc[0].completions and alone.answer == sc[0].answer
    with pytest.raises(ValueError, match="parallel_budget"):
        generators["sc3"].generate(prompts, parallel_budget=0)


def test_n_completions_are_n_independent_chains_of_attempts(generators):
    gen, prompts = generators["goes on"], ["What is 2+3?", "What is 7*6?"]
    one = gen.generate(prompts, token_budget=BUDGET, seed=4)
    three = gen.generate(prompts, token_budget=BUDGET, seed=4, parallel_budget=3)
    for single, many in zip(one, three):
        assert len(many.completions) == len(many.finish_reasons) == len(many.attempt_choices) == 3
        assert many.completions[0] == single.completions[0]  # chain 0 is the one completion's chain
        assert many.attempt_choices[0] == {"action": single.action, **single.adapter_info()}
        assert all(c["decodes"] == 3 and c["stopped_by"] == "budget" for c in many.attempt_choices)
    # the other chains draw their own samples: their attempts are not chain 0's
    assert any(c["attempt_tokens"] != three[0].attempt_choices[0]["attempt_tokens"] or
               three[0].completions[k] != three[0].completions[0]
               for k, c in enumerate(three[0].attempt_choices) if k)
    # and a prompt's chains do not depend on the other prompts of the call (its position and the seed key them)
    alone = gen.generate(prompts[:1], token_budget=BUDGET, seed=4, parallel_budget=3)[0]
    assert alone.completions == three[0].completions


@pytest.mark.parametrize("name, decodes, reason", [("goes on", 3, "budget"), ("confident", 1, "confident")])
def test_served_responses_say_how_many_attempts_and_why_they_stopped(generators, name, decodes, reason):
    gen = generators[name]
    chat = dict(model=gen.name, messages=[{"role": "user", "content": "What is 2+3?"}], max_tokens=BUDGET, seed=3)
    completion = dict(model=gen.name, prompt="What is 2+3?", max_tokens=BUDGET, seed=3)
    with BackgroundServer(create_app(gen, LIMITS)) as url:
        for path, body, content in (("chat/completions", chat, lambda c: c["message"]["content"]),
                                    ("completions", completion, lambda c: c["text"])):
            full = httpx.post(f"{url}/v1/{path}", json=body, timeout=60).json()
            info = full["decoding_adapter"]["choices"][0]
            assert info["decodes"] == decodes and info["stopped_by"] == reason and len(info["attempts"]) == decodes
            assert full["decoding_adapter"]["kind"] == gen.kind
            with httpx.stream("POST", f"{url}/v1/{path}", json={**body, "stream": True}, timeout=60) as r:
                chunks = [json.loads(line[6:]) for line in r.iter_lines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
            deltas = [(c.get("delta") or {}).get("content") or c.get("text") or ""
                      for chunk in chunks for c in chunk["choices"]]
            assert "".join(deltas) == content(full["choices"][0])  # the streamed tokens are the chosen attempt's
            streamed = chunks[-1]["decoding_adapter"]["choices"][0]
            assert streamed["decodes"] == decodes and streamed["stopped_by"] == reason
        two = httpx.post(f"{url}/v1/chat/completions", json={**chat, "n": 2}, timeout=60).json()
        infos = two["decoding_adapter"]["choices"]
        assert len(two["choices"]) == 2 and [i["decodes"] for i in infos] == [decodes, decodes]
        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**chat, "n": 2, "stream": True},
                          timeout=60) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        for index in (0, 1):
            text = "".join((c.get("delta") or {}).get("content") or "" for chunk in chunks
                           for c in chunk["choices"] if c["index"] == index)
            assert text == two["choices"][index]["message"]["content"]


def test_a_request_s_problem_id_keys_its_attempts_as_generate_s_problem_ids_do(generators):
    gen = generators["goes on"]
    question = "What is 2+3?"
    expected = gen.generate([question], token_budget=BUDGET, seed=3, problem_ids=["arithmetic/sealed2/7"])[0]
    other = gen.generate([question], token_budget=BUDGET, seed=3)[0]
    chat = dict(model=gen.name, messages=[{"role": "user", "content": question}], max_tokens=BUDGET, seed=3,
                problem_id="arithmetic/sealed2/7")
    with BackgroundServer(create_app(gen, LIMITS)) as url:
        served = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60).json()
        wrong = httpx.post(f"{url}/v1/completions", json=dict(model=gen.name, prompt=["a", "b"], max_tokens=2,
                                                              problem_id="only-one"), timeout=60)
    assert served["choices"][0]["message"]["content"] == expected.completions[0]
    info = served["decoding_adapter"]["choices"][0]
    assert info["attempt_records"] == expected.attempt_records and "problem_id" not in served["decoding_adapter"][
        "ignored_parameters"]
    assert expected.attempt_records != other.attempt_records or expected.completions != other.completions
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "problem_id"
