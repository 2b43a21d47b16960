"""Prompts prefilled once and reused (``lm.prompt_cache``): a row whose prompt comes from the cache
decodes the same tokens as a fresh decode, beside other prompts and in other batch compositions, on
tiny random Llamas in float32 and bf16; sequential attempts make the same attempts with it and
prefill each prompt once; the byte cap evicts the least recently used; an entry made by another
LM or dtype is not used; attempt rounds drop a problem's prompt when the problem stops."""

import copy

import pytest
import torch
from test_batch_invariance import attention_shaped_lm

from conftest import make_tiny_lm
from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.attempts import AttemptRounds, AttemptState, sequential_attempts
from decoding_adapters.decoding.loop import decode, row_seed
from decoding_adapters.lm.models import FrozenLM, ModelSpec
from decoding_adapters.lm.prompt_cache import PromptCache

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TOKENS = 24
ARMS = [GREEDY, DecodingAction(temperature=0.7)]


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def lm(request):
    return attention_shaped_lm(request.param)


@pytest.fixture(scope="module")
def prompts(lm):
    """Eight chats of distinct lengths."""
    questions = ["a", "12+7", "abc 0123", "9*9=?", "what is 12 * 34 ?", "hello there", "0-0-0-0-0-0-0", "x = 3"]
    return lm.encode_chat([[{"role": "user", "content": q}] for q in questions])


def _rows(lm, prompts, batch, cache=None, arm=0):
    """Tokens of each prompt index in ``batch`` decoded together (arm 0: greedy; 1: T = 0.7, each
    row's seed from its prompt index, so a row draws the same wherever it sits)."""
    result = decode(lm, [prompts[i] for i in batch], ActionSet(ARMS), row_actions=arm, token_budget=TOKENS,
                    row_seeds=[row_seed(0, i) for i in batch], prompt_cache=cache)
    return {i: result.tokens[r, : result.lengths[r]].tolist() for r, i in enumerate(batch)}


@pytest.mark.parametrize("arm", [0, 1], ids=["greedy", "sampled"])
def test_rows_from_the_cache_decode_as_a_fresh_decode(lm, prompts, arm):
    fresh = {}
    for i in range(len(prompts)):
        fresh.update(_rows(lm, prompts, [i], arm=arm))
    assert len({tuple(t) for t in fresh.values()}) > len(prompts) // 2  # the rows differ: a test that can fail
    cache = PromptCache()
    assert _rows(lm, prompts, [1, 4, 6], cache, arm) == {i: fresh[i] for i in (1, 4, 6)}
    assert (len(cache), cache.hits, cache.misses) == (3, 0, 3)
    # the cached prompts beside new ones, in another order and other batches
    batches = [[7, 4, 0], [6, 2, 1, 5, 3]]
    for batch in batches:
        assert _rows(lm, prompts, batch, cache, arm) == {i: fresh[i] for i in batch}
    assert (cache.hits, cache.misses) == (3, 8)
    # every prompt from the cache, all in one batch, and one prompt fanned out to several rows
    assert _rows(lm, prompts, list(range(len(prompts)))[::-1], cache, arm) == fresh
    result = decode(lm, prompts, ActionSet(ARMS), prompt_of_row=[3, 3, 5], row_actions=arm, token_budget=TOKENS,
                    row_seeds=[row_seed(0, 3), row_seed(0, 3), row_seed(0, 5)], prompt_cache=cache)
    assert [result.tokens[r, : result.lengths[r]].tolist() for r in range(3)] == [fresh[3], fresh[3], fresh[5]]
    assert cache.misses == 8


def test_the_length_groups_prefill_reuses_too_and_padded_groups_do_not(lm, prompts):
    fresh = _rows(lm, prompts, [0, 3, 5])
    cache = PromptCache()
    lm.prefill = "lengths"  # groups of one length: a prompt's prefill does not depend on its mates
    try:
        assert _rows(lm, prompts, [3], cache) == {3: fresh[3]}
        assert _rows(lm, prompts, [0, 3, 5], cache) == fresh
        assert (cache.hits, cache.misses) == (1, 3)
    finally:
        lm.prefill = "packed"
    # the packed prefill does not take what the length groups made
    assert _rows(lm, prompts, [3], cache) == {3: fresh[3]} and (cache.hits, cache.misses) == (1, 4)
    padded = FrozenLM(lm.model, lm.tokenizer, ModelSpec("tiny", batch_invariant=False))
    unused = PromptCache()
    _rows(padded, prompts, [0, 3], unused)
    _rows(padded, prompts, [0, 3], unused)
    assert (len(unused), unused.hits, unused.misses) == (0, 0, 0)


def test_an_entry_of_another_lm_or_dtype_is_not_used():
    fp32 = attention_shaped_lm(torch.float32)
    bf16 = attention_shaped_lm(torch.bfloat16)  # the same weights in another dtype
    other = FrozenLM(make_tiny_lm(seed=3).model, fp32.tokenizer, ModelSpec("tiny"))  # same vocabulary, other weights
    prompts = fp32.encode_chat([[{"role": "user", "content": q}] for q in ("12+7", "what is 12 * 34 ?")])
    cache = PromptCache()
    _rows(fp32, prompts, [0, 1], cache)
    for lm in (bf16, other, fp32):
        fresh = _rows(lm, prompts, [0, 1])
        misses = cache.misses
        assert _rows(lm, prompts, [0, 1], cache) == fresh
        assert cache.misses == misses + 2 and len(cache) == 2  # prefilled again, the entries replaced
        assert _rows(lm, prompts, [1, 0], cache) == fresh and cache.misses == misses + 2  # now reused


def test_the_cap_evicts_the_least_recently_used(lm, prompts):
    sizes = {}
    for i in range(len(prompts)):
        alone = PromptCache()
        _rows(lm, prompts, [i], alone)
        sizes[i] = alone.nbytes
    assert sizes[0] == min(sizes.values())  # prompt 0 is the shortest
    cache = PromptCache(max_bytes=sizes[1] + sizes[2] + sizes[3])
    _rows(lm, prompts, [1, 2], cache)
    _rows(lm, prompts, [3], cache)
    _rows(lm, prompts, [1], cache)  # 1 used again: 2 is now the least recently used
    assert [prompts[i] in cache for i in (1, 2, 3)] == [True, True, True]
    fresh = _rows(lm, prompts, [0])
    assert _rows(lm, prompts, [0], cache) == fresh  # 0 kept: 2 evicted, the others fit beside it
    assert [prompts[i] in cache for i in (0, 1, 2, 3)] == [True, True, False, True]
    assert cache.nbytes == sizes[0] + sizes[1] + sizes[3] <= cache.max_bytes
    tiny = PromptCache(max_bytes=sizes[0] - 1)  # an entry larger than the cap is not kept
    _rows(lm, prompts, [0], tiny)
    assert (len(tiny), tiny.nbytes) == (0, 0)
    with pytest.raises(ValueError, match="max_bytes"):
        PromptCache(-1)


class UpTo:
    """A decider that makes ``attempts[i]`` attempts of problem i: greedy once, then T = 0.7 (a
    problem's every attempt "says" its index: ``_attempts``' extract)."""

    def __init__(self, attempts):
        self.attempts = attempts

    def decide(self, state: AttemptState, rows):
        wanted = [self.attempts[int(state.strings[r][0])] for r in rows]
        return [(1, "") if len(state.order[r]) < n else (None, "rule") for r, n in zip(rows, wanted)]

    def answer(self, state: AttemptState, rows):
        return [-1] * len(rows)


def _attempts(lm, prompts, attempts, cache_bytes=None):
    extra = {} if cache_bytes is None else {"prompt_cache_bytes": cache_bytes}
    return sequential_attempts(lm, prompts, ARMS, UpTo(attempts), first_arm=0, distinct=[1, max(attempts)],
                               max_attempts=max(attempts), token_budgets=[TOKENS] * len(prompts),
                               seeds=lambda i, a, j: row_seed(1, i, a, j), extract=lambda i, text: str(i),
                               **extra)


def _prefilled(lm):
    """Count the prompts ``lm``'s packed prefill runs over (an instance attribute shadows the method)."""
    counted, prefill = [0], lm._prefill_packed

    def counting(prompts):
        counted[0] += len(prompts)
        return prefill(prompts)

    lm._prefill_packed = counting
    return counted


def test_sequential_attempts_make_the_same_attempts_and_prefill_each_prompt_once(lm, prompts):
    attempts = [3, 1, 4, 2, 3, 1, 2, 4]
    without = copy.copy(lm)
    prefilled_without = _prefilled(without)
    plain = _attempts(without, prompts, attempts, cache_bytes=0)
    cached = copy.copy(lm)
    prefilled_with = _prefilled(cached)
    reused = _attempts(cached, prompts, attempts)
    assert reused.token_ids == plain.token_ids and reused.paths == plain.paths and reused.said == plain.said
    assert torch.allclose(reused.state.confidence, plain.state.confidence, rtol=0, atol=0, equal_nan=True)
    assert [len(p) for p in reused.paths] == attempts
    assert prefilled_without[0] == sum(attempts) and prefilled_with[0] == len(prompts)


class Always:
    """A decider that always asks for one more attempt at T = 0.7 (problems stop at ``max_attempts``)."""

    def decide(self, state: AttemptState, rows):
        return [(1, "")] * len(rows)

    def answer(self, state: AttemptState, rows):
        return [-1] * len(rows)


def test_attempt_rounds_drop_a_prompt_when_its_problem_stops(lm, prompts):
    rounds = AttemptRounds(lm, ARMS, Always(), first_arm=0, distinct=[1, 2], max_attempts=3)
    keys = [rounds.add(prompts[i], TOKENS, lambda a, j, i=i: row_seed(2, i, a, j), lambda text: "") for i in range(3)]
    twin = rounds.add(prompts[0], TOKENS, lambda a, j: row_seed(2, 9, a, j), lambda text: "")  # prompt 0 again
    cache = rounds.prompt_cache
    assert rounds.round() == {} and [prompts[i] in cache for i in range(3)] == [True] * 3
    assert (cache.hits, cache.misses) == (0, 4)
    assert set(rounds.round(gone=lambda going: [keys[1]])) == {keys[1]}  # its client left before the round
    assert prompts[1] not in cache and (cache.hits, cache.misses) == (3, 4)
    assert set(rounds.round(gone=lambda going: [twin])) == {twin, keys[0], keys[2]}  # the others' third attempt
    assert (cache.hits, cache.misses) == (5, 4)
    assert len(cache) == 0 and cache.nbytes == 0
    assert AttemptRounds(lm, ARMS, Always(), first_arm=0, distinct=[1, 1], max_attempts=1,
                         prompt_cache_bytes=0).prompt_cache is None


def test_the_graphed_decode_reuses_prompts_too():
    """The CUDA-graph path's static buffers are filled from the cache the same way (on the CPU its
    replays run eagerly: ``FrozenLM.graphs_without_capture``; ``--device cuda`` captures them)."""
    graphed = make_tiny_lm()
    graphed.graphs_without_capture = graphed.device.type == "cpu"
    prompts = graphed.encode_chat([[{"role": "user", "content": q}] for q in ("What is 2+3?", "Hi", "Compute 17*23")])
    fresh = _rows(graphed, prompts, [0, 1, 2], arm=1)
    cache = PromptCache()
    assert _rows(graphed, prompts, [2, 0], cache, arm=1) == {i: fresh[i] for i in (2, 0)}
    assert _rows(graphed, prompts, [1, 0, 2], cache, arm=1) == fresh and (cache.hits, cache.misses) == (2, 3)
