"""Every adapter kind answers a chat and a completion alike, from Python and from the server, and
an empty prompt is a 400 (a ``ValueError`` from Python), never a 500. The draft-gated adapter here
stops its draft at the first complete answer, so its task sees each prompt's question."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from test_draft_serving import BUDGET, LIMITS, SAMPLER
from test_server import BackgroundServer

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.policies.draft import DraftContextConfig
from decoding_adapters.policies.networks import AdapterConfig, SequencePolicy, SequencePolicyConfig, save_adapter
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import create_app

CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+3?"}]


def _stop_at_answer_draft(directory, lm, base_model: str):
    context = DraftContextConfig(features="confidence", token_budget=BUDGET)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=context.dim(lm.hidden_size), num_actions=2,
                                                 prior=(0.5, 0.5), input_norm="standardise"))
    config = AdapterConfig(kind="draft", policy=dataclasses.asdict(policy.config), actions=[SAMPLER.to_dict()],
                           base_model=base_model, base_fingerprint=lm.fingerprint(), parallel_budgets=[1, 2],
                           draft=dataclasses.asdict(context), task="arithmetic")
    return save_adapter(directory, policy, config)


@pytest.fixture(scope="module")
def generators(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("every-kind")
    base = str(save_tiny_base(tiny_lm, root / "base"))
    dirs = {"draft": _stop_at_answer_draft(root / "draft", tiny_lm, base)}
    for kind in ("token", "sequence"):
        dirs[kind] = make_adapter(root / kind, tiny_lm, kind, base_model=base)
    return {kind: Adapter.from_pretrained(d, lm=tiny_lm).generator() for kind, d in dirs.items()}


@pytest.mark.parametrize("kind", ["draft", "token", "sequence"])
def test_python_answers_text_and_chat(generators, kind):
    gen = generators[kind]
    by_text = gen.generate(["What is 2+3?"], token_budget=BUDGET)
    by_chat = gen.generate([CHAT], token_budget=BUDGET)
    assert len(by_text) == len(by_chat) == 1 and by_chat[0].completions
    for empty in ("", "   ", [{"role": "user", "content": ""}]):
        with pytest.raises(ValueError, match="prompt 0 is empty"):
            gen.generate([empty], token_budget=BUDGET)


@pytest.mark.parametrize("kind", ["draft", "token"])
def test_server_answers_chat_and_completions_and_refuses_an_empty_prompt(generators, kind):
    gen = generators[kind]
    with BackgroundServer(create_app(gen, LIMITS)) as url:
        chat = dict(model=gen.name, messages=CHAT, max_tokens=BUDGET, seed=1)
        done = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60)
        assert done.status_code == 200, done.text
        assert isinstance(done.json()["choices"][0]["message"]["content"], str)
        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**chat, "stream": True, "n": 2},
                          timeout=60) as r:
            assert r.status_code == 200
            lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]" and all("error" not in json.loads(x) for x in lines[:-1])
        plain = dict(model=gen.name, prompt="What is 2+3?", max_tokens=BUDGET)
        assert httpx.post(f"{url}/v1/completions", json=plain, timeout=60).status_code == 200
        for path, body in (("completions", {**plain, "prompt": ""}), ("completions", {**plain, "prompt": ["a", ""]}),
                           ("chat/completions", {**chat, "messages": [{"role": "user", "content": ""}]})):
            for stream in (False, True):
                r = httpx.post(f"{url}/v1/{path}", json={**body, "stream": stream}, timeout=60)
                assert r.status_code == 400, (path, stream, r.text)
                assert "is empty" in r.json()["error"]["message"]
