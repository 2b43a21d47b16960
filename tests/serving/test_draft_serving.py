"""A draft-gated adapter everywhere an adapter goes: ``Adapter.from_pretrained(...).generator()``
and the OpenAI-compatible server (both passes inside one request; the response says whether the
draft was kept; a kept draft costs one decode and a re-decode two; streaming sends the final
answers' tokens)."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from test_server import BackgroundServer

from adapter_helpers import save_tiny_base
from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import decode
from decoding_adapters.policies.draft import DraftContextConfig
from decoding_adapters.policies.networks import AdapterConfig, SequencePolicy, SequencePolicyConfig, save_adapter
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.server import ServerLimits, create_app

LIMITS = ServerLimits(max_tokens_limit=32, max_batch=8, max_prompt_chars=1000, max_queue=64, batch_wait_ms=5)
SAMPLER = DecodingAction(temperature=1.0)
BUDGET = 6


def make_draft_adapter(directory, lm, keep: bool, base_model: str):
    """An untrained draft-gated adapter whose prior (the policy's start) keeps every draft or
    re-decodes every one."""
    context = DraftContextConfig(features="confidence", token_budget=BUDGET)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=context.dim(lm.hidden_size), num_actions=2,
                                                 prior=(0.99, 0.01) if keep else (0.01, 0.99),
                                                 input_norm="standardise"))
    config = AdapterConfig(kind="draft", policy=dataclasses.asdict(policy.config), actions=[SAMPLER.to_dict()],
                           base_model=base_model, base_fingerprint=lm.fingerprint(), parallel_budgets=[1, 2],
                           draft=dataclasses.asdict(context), stop_at_answer=False)
    return save_adapter(directory, policy, config)


@pytest.fixture(scope="module")
def generators(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("draft-served")
    base = str(save_tiny_base(tiny_lm, root / "base"))
    return {keep: Adapter.from_pretrained(make_draft_adapter(root / f"keep-{keep}", tiny_lm, keep, base),
                                          lm=tiny_lm).generator() for keep in (True, False)}


def test_generator_keeps_or_redecodes(generators, tiny_lm):
    prompt = "What is 2+3?"
    draft = decode(tiny_lm, tiny_lm.encode_chat([[{"role": "user", "content": prompt}]]), ActionSet([GREEDY]),
                   row_actions=0, token_budget=BUDGET)
    kept = generators[True].generate([prompt])[0]
    assert kept.kind == "draft" and kept.draft_kept and kept.decodes == 1 and kept.action == "keep draft"
    assert kept.completions == draft.texts and kept.completion_tokens == [int(draft.lengths[0])]
    redone = generators[False].generate([prompt])[0]
    assert not redone.draft_kept and redone.decodes == 2 and len(redone.completions) == 1
    assert redone.action == SAMPLER.name and redone.draft_tokens == int(draft.lengths[0])
    wide = generators[False].generate([prompt], parallel_budget=2)[0]
    assert wide.decodes == 2 and wide.completions[0] == draft.texts[0] and len(wide.completions) == 2
    assert generators[True].generate([prompt], parallel_budget=2)[0].completions == draft.texts


@pytest.mark.parametrize("keep", [True, False])
def test_served_response_says_whether_the_draft_was_kept_and_what_it_cost(generators, keep):
    body = dict(model=generators[keep].name, messages=[{"role": "user", "content": "Hi there"}], max_tokens=BUDGET,
                seed=3)
    with BackgroundServer(create_app(generators[keep], LIMITS)) as url:
        full = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
        info = full["decoding_adapter"]["choices"][0]
        assert info["draft_kept"] is keep and info["decodes"] == (1 if keep else 2)
        assert full["decoding_adapter"]["kind"] == "draft" and full["decoding_adapter"]["actions"][0] == "keep draft"
        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
            chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    text = "".join(c["delta"].get("content") or "" for chunk in map(json.loads, chunks) for c in chunk["choices"])
    assert text == full["choices"][0]["message"]["content"]  # the streamed tokens are the final answer's


def test_a_kept_draft_at_n_2_answers_with_two_choices(generators):
    """A client that asks for n = 2 gets two choices where the draft is kept, streamed or not: the
    draft and a sample of the adapter's most probable re-decode action (two decodes)."""
    body = dict(model=generators[True].name, messages=[{"role": "user", "content": "Hi"}], max_tokens=BUDGET, n=2,
                seed=5)
    with BackgroundServer(create_app(generators[True], LIMITS)) as url:
        full = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
    assert len(full["choices"]) == 2 and all(c["message"]["content"] for c in full["choices"])
    infos = full["decoding_adapter"]["choices"]
    assert all(i["draft_kept"] and i["decodes"] == 2 for i in infos)
    texts = {}
    for chunk in chunks:
        for c in chunk["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
    assert texts == {i: c["message"]["content"] for i, c in enumerate(full["choices"])}
    library = generators[True].generate(["Hi"], parallel_budget=2)[0]  # the library call: the draft alone
    assert library.draft_kept and library.decodes == 1 and len(library.completions) == 1


class _AnswerAfterTwoCharacters:
    """A task stand-in whose "complete answer" is any text of two or more characters."""

    def answer_complete(self, problem, text):
        return len(text) >= 2


def test_a_stopping_adapter_serves_the_stopped_draft(tmp_path, tiny_lm):
    """A draft-gated adapter that drafts (and re-decodes) with the stop ends its answers at the task's
    first complete answer, reports them as stopped, and without a task to ask it is refused."""
    base = str(save_tiny_base(tiny_lm, tmp_path / "base"))
    context = DraftContextConfig(features="confidence", token_budget=BUDGET)
    prompt = "What is 2+3?"
    prompts = tiny_lm.encode_chat([[{"role": "user", "content": prompt}]])
    checks = [lambda text: len(text) >= 2]
    draft = decode(tiny_lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=BUDGET, stop_checks=checks)
    for keep in (True, False):
        policy = SequencePolicy(SequencePolicyConfig(embed_dim=context.dim(tiny_lm.hidden_size), num_actions=2,
                                                     prior=(0.99, 0.01) if keep else (0.01, 0.99),
                                                     input_norm="standardise"))
        config = AdapterConfig(kind="draft", policy=dataclasses.asdict(policy.config), actions=[SAMPLER.to_dict()],
                               base_model=base, base_fingerprint=tiny_lm.fingerprint(),
                               draft=dataclasses.asdict(context), stop_at_answer=True)
        adapter = Adapter.from_pretrained(save_adapter(tmp_path / f"stop-{keep}", policy, config), lm=tiny_lm)
        out = adapter.generator(task=_AnswerAfterTwoCharacters()).generate([prompt])[0]
        assert out.draft_tokens == int(draft.lengths[0]) and out.draft_kept is keep
        if keep:
            assert out.completions == draft.texts
        assert len(out.completions[0]) >= 2 and out.finish_reasons == ["stop"]
        with pytest.raises(ValueError, match="names no task"):  # a draft-gated policy reads the stopped draft
            adapter.generator()
