"""``serve`` streams token by token: SSE chunks as the batched decode produces tokens, checked with
the official ``openai`` client against uvicorn on 127.0.0.1 (tiny model, a saved tiny token adapter).

The served generator sleeps a little at every decode step of a streaming batch, so that "chunks
arrive while the completion is still being decoded" and "a client that leaves frees its rows" are
observable on a tiny model that would otherwise finish in a few milliseconds."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from test_server import BackgroundServer

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.serving.adapter import Adapter
from decoding_adapters.serving.generator import AdaptiveGenerator
from decoding_adapters.serving.server import ServerLimits, create_app
from decoding_adapters.serving.worker import IncrementalDetokenizer, _held_back

LIMITS = ServerLimits(max_tokens_limit=32, max_batch=8, max_prompt_chars=1000, max_queue=64, batch_wait_ms=20)
STEP_DELAY_S = 0.01


class SlowGenerator(AdaptiveGenerator):
    """Sleeps ``step_delay_s`` at each decode step of a batch that streams (non-streamed batches run as usual)."""

    step_delay_s = STEP_DELAY_S

    def run(self, prepared, deterministic_policy=True, on_tokens=None, **kwargs):
        if on_tokens is not None:
            inner, explode = on_tokens, any("EXPLODE" in str(p.prompt) for p in prepared)
            steps = iter(range(10**6))

            def on_tokens(events):
                time.sleep(self.step_delay_s)
                if explode and next(steps) == 3:  # a decode that fails after its first tokens went out
                    raise RuntimeError("the GPU caught fire")
                return inner(events)

        return super().run(prepared, deterministic_policy, on_tokens, **kwargs)


@pytest.fixture(scope="module")
def generator(tmp_path_factory, tiny_lm):
    root = tmp_path_factory.mktemp("streamed")
    base = save_tiny_base(tiny_lm, root / "base")
    adapter = make_adapter(root / "tiny-token", tiny_lm, "token", base_model=str(base))
    loaded = Adapter.from_pretrained(adapter, lm=tiny_lm)
    return SlowGenerator(loaded.policy, loaded.config, loaded.lm, name=loaded.name)


@pytest.fixture(scope="module")
def base_url(generator):
    with BackgroundServer(create_app(generator, LIMITS, deterministic_policy=False)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=60)


def _stats(base_url) -> dict:
    return httpx.get(f"{base_url}/health", timeout=30).json()["stats"]


def _collect_chat(stream) -> tuple[dict, dict, object, list]:
    """Texts and finish reasons by choice index, the usage, and (arrival time, chunk) of every chunk."""
    texts, reasons, usage, timeline = {}, {}, None, []
    for chunk in stream:
        timeline.append((time.monotonic(), chunk))
        usage = chunk.usage or usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                assert c.index not in reasons, "finish_reason sent twice"
                reasons[c.index] = c.finish_reason
    return texts, reasons, usage, timeline


MODEL = "tiny-token"  # the served name: the adapter directory's
CHAT = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=24)


def test_chunks_arrive_while_decoding_and_add_up_to_the_non_streamed_answer(client):
    full = client.chat.completions.create(**CHAT, n=2, seed=5)
    stream = client.chat.completions.create(**CHAT, n=2, seed=5, stream=True, stream_options={"include_usage": True})
    texts, reasons, usage, timeline = _collect_chat(stream)
    assert [texts[0], texts[1]] == [c.message.content for c in full.choices]
    assert reasons == {c.index: c.finish_reason for c in full.choices}
    assert usage is not None and usage.model_dump() == full.usage.model_dump()
    content = [t for t, chunk in timeline if any(c.delta.content for c in chunk.choices)]
    assert len(content) > 2  # token by token, not one chunk with the whole text
    # the first text was out long before the last: at least 10 decode steps (STEP_DELAY_S each) in between
    assert usage.completion_tokens >= 2 * 12 and content[-1] - content[0] > 10 * STEP_DELAY_S
    # OpenAI's include_usage shape: usage null on every chunk but the last, which has no choices
    chunks = [chunk for _, chunk in timeline]
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].choices == [] and chunks[-1].usage
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"
    assert "decoding_adapter" in chunks[-1].model_extra


def test_completions_stream_with_prompts_n_echo_and_no_usage(client):
    kwargs = dict(model=MODEL, prompt=["Once", "upon"], n=2, max_tokens=12, seed=8)
    full = client.completions.create(**kwargs, echo=True)
    texts, reasons, chunks = {}, {}, []
    for chunk in client.completions.create(**kwargs, echo=True, stream=True):
        chunks.append(chunk)
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            reasons[c.index] = c.finish_reason or reasons.get(c.index)
    assert [texts[i] for i in range(4)] == [c.text for c in full.choices]
    assert texts[2].startswith("upon") and reasons == {c.index: c.finish_reason for c in full.choices}
    assert all(c.usage is None for c in chunks) and all(c.object == "text_completion" for c in chunks)
    info = chunks[-1].model_extra["decoding_adapter"]
    assert [c["index"] for c in info["choices"]] == [0, 1, 2, 3] and info["seed"] == 8
    assert sum(len(c["token_actions"]) for c in info["choices"]) == full.usage.completion_tokens


def test_stop_string_across_tokens_is_held_back_and_cut(client):
    plain = client.completions.create(model=MODEL, prompt="abc", max_tokens=24, seed=11).choices[0].text
    assert len(plain) >= 8
    stop = plain[4:6]  # two characters: two tokens of the char-level tokenizer
    cut = client.completions.create(model=MODEL, prompt="abc", max_tokens=24, seed=11, stop=[stop])
    streamed, reason, usage = "", None, None
    for chunk in client.completions.create(model=MODEL, prompt="abc", max_tokens=24, seed=11, stop=[stop], stream=True,
                                           stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for c in chunk.choices:
            streamed += c.text
            reason = c.finish_reason or reason
    assert streamed == cut.choices[0].text == plain[: plain.index(stop)] and reason == "stop"
    # the streamed row was stopped in the decode right after the stop string (non-streamed decodes on)
    assert usage.completion_tokens <= len(plain[: plain.index(stop)]) + len(stop)


def test_concurrent_streams_are_batched_and_all_complete(client, base_url):
    before = _stats(base_url)

    def one(i: int) -> tuple[str, str]:
        prompt = [{"role": "user", "content": f"Question {i}"}]
        stream = client.chat.completions.create(model=MODEL, messages=prompt, max_tokens=10, seed=i, stream=True)
        texts, *_ = _collect_chat(stream)
        full = client.chat.completions.create(model=MODEL, messages=prompt, max_tokens=10, seed=i)
        return texts[0], full.choices[0].message.content

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    assert all(streamed == full for streamed, full in results)
    after = _stats(base_url)
    assert after["streams"] - before["streams"] == 8
    assert after["max_rows_in_batch"] > 1 and after["batches"] - before["batches"] < 16  # streams shared decodes


def test_a_client_that_leaves_frees_its_rows_and_the_others_finish(client, base_url, generator, monkeypatch):
    monkeypatch.setattr(generator, "step_delay_s", 0.05)  # 32 steps take 1.6 s: the hang-up comes long before
    long = dict(model=MODEL, messages=[{"role": "user", "content": "Go on and on."}], max_tokens=32, n=2, seed=21)
    assert all(c.finish_reason == "length" for c in client.chat.completions.create(**long).choices)  # 32 steps
    others = [dict(model=MODEL, messages=[{"role": "user", "content": f"Other {i}"}], max_tokens=16, seed=i)
              for i in range(3)]
    expected = [client.chat.completions.create(**o).choices[0].message.content for o in others]
    before = _stats(base_url)
    go = threading.Barrier(4)

    def leaver() -> int:
        go.wait(timeout=30)
        stream = client.chat.completions.create(**long, stream=True)
        seen = 0
        for chunk in stream:
            seen += sum(bool(c.delta.content) for c in chunk.choices)
            if seen >= 2:
                break
        stream.close()  # hang up mid-stream
        return seen

    def stayer(i: int) -> str:
        go.wait(timeout=30)
        texts, *_ = _collect_chat(client.chat.completions.create(**others[i], stream=True))
        return texts[0]

    with ThreadPoolExecutor(max_workers=4) as pool:
        left = pool.submit(leaver)
        stayed = [pool.submit(stayer, i) for i in range(3)]
        assert left.result(timeout=60) == 2
        assert [f.result(timeout=60) for f in stayed] == expected
    deadline = time.monotonic() + 10
    while _stats(base_url)["disconnected_rows"] == before["disconnected_rows"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _stats(base_url)["disconnected_rows"] - before["disconnected_rows"] == 2  # both rows stopped early
    assert httpx.get(f"{base_url}/health", timeout=30).json()["status"] == "ok"
    again = client.chat.completions.create(**others[0], stream=True)
    assert _collect_chat(again)[0][0] == expected[0]  # and the server streams on


def test_errors_before_the_first_token_are_ordinary_responses(client, base_url):
    with pytest.raises(openai.BadRequestError, match="context"):  # found while preparing, on the decode thread
        client.completions.create(model=MODEL, prompt="y" * 500, max_tokens=32, stream=True)
    with pytest.raises(openai.BadRequestError, match="limit of 32"):
        client.chat.completions.create(**{**CHAT, "max_tokens": 64}, stream=True)
    r = httpx.post(f"{base_url}/v1/completions", json={"prompt": "x" * 500, "max_tokens": 32, "stream": True},
                   timeout=30)
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")


def test_a_decode_failing_mid_stream_ends_it_with_an_error_event(client, base_url):
    chunks = []
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "EXPLODE"}],
                                            max_tokens=20, seed=1, stream=True)
    with pytest.raises(openai.APIError, match="generation failed"):
        for chunk in stream:
            chunks.append(chunk)
    assert any(c.choices and c.choices[0].delta.content for c in chunks)  # it had started
    texts, reasons, *_ = _collect_chat(client.chat.completions.create(**CHAT, seed=2, stream=True))
    assert reasons[0] in ("stop", "length")  # the server streams on


def test_generator_reports_tokens_across_chunks_for_both_kinds(tmp_path, tiny_lm):
    base = save_tiny_base(tiny_lm, tmp_path / "base")
    for kind in ("sequence", "token"):
        adapter = make_adapter(tmp_path / kind, tiny_lm, kind, base_model=str(base))
        gen = Adapter.from_pretrained(adapter, lm=tiny_lm).generator(max_batch_rows=2)  # 3 prompts x 2: 3 decodes
        prepared = gen.prepare(["a", "bb", "ccc"], token_budget=6, parallel_budget=2, seed=3)
        seen: dict[tuple[int, int], list] = {}

        def on_tokens(events, seen=seen):
            for e in events:
                seen.setdefault((e.prompt, e.completion), []).append(e)
            return [(1, 0)] if any(e.prompt == 1 for e in events) else None  # stop completion 0 of prompt 1 at once

        outs = gen.run(prepared, on_tokens=on_tokens)
        assert sorted(seen) == [(p, j) for p in range(3) for j in range(2)]
        assert len(seen[(1, 0)]) == 1 and outs[1].completion_tokens[0] == 1 and outs[1].finish_reasons[0] == "length"
        plain = gen.run(prepared)
        for (p, j), events in seen.items():
            if kind == "sequence":
                assert {e.action for e in events} == {plain[p].action_index}
            if (p, j) == (1, 0):
                continue
            assert [e.finish_reason for e in events[:-1]] == [None] * (len(events) - 1)
            assert events[-1].finish_reason == plain[p].finish_reasons[j]
            text = tiny_lm.tokenizer.decode([e.token_id for e in events], skip_special_tokens=True)
            assert text == plain[p].completions[j] and len(events) == plain[p].completion_tokens[j]


# ---- the incremental detokenizer -----------------------------------------------------------------


def _byte_level_tokenizer():
    """One token per UTF-8 byte (GPT-2 style byte-level BPE without merges): characters span tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_detokenizer_never_splits_a_character():
    tok = _byte_level_tokenizer()
    text = "héllo 👋 wörld — ça va? 日本"
    ids = tok.encode(text)
    assert len(ids) > len(text)  # multi-byte characters are several tokens
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.push(i) for i in ids]
    assert all("\ufffd" not in d for d in deltas) and "" in deltas  # bytes were held back, never sent broken
    assert "".join(deltas) + detok.finish() == text
    cut = IncrementalDetokenizer(tok)  # a completion that ends inside a character: the full decode's text
    streamed = "".join(cut.push(i) for i in ids[:8]) + cut.finish()
    assert streamed == tok.decode(ids[:8]) and streamed.endswith("\ufffd")


def test_held_back_is_the_longest_stop_prefix_at_the_end():
    assert _held_back("hello wo", ["world"]) == 2 and _held_back("hello w", ["world", "xy"]) == 1
    assert _held_back("hello", ["world"]) == 0 and _held_back("ab", ["abc", "b"]) == 2
