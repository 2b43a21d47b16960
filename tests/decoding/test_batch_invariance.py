"""Batch invariance: a row's greedy tokens do not depend on the rows it shares a batch with.

Every row is decoded alone and inside batches of other sizes and compositions (mates with prompts of
other lengths, mates that finish early, the same prompt fanned out, reversed order) on tiny
random-weight Llamas in float32 and bf16, with the LM's default kernels (``ModelSpec()``:
``batch_invariant=True``); the tokens must be equal, not close."""

import copy
import random

import pytest
import torch

from conftest import make_char_tokenizer, make_tiny_lm
from decoding_adapters.decoding.actions import GREEDY, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.models import FrozenLM, ModelSpec

TOKENS = 32


def attention_shaped_lm(dtype: torch.dtype) -> FrozenLM:
    """A 2-layer random Llama whose attention has the default model's shapes (head_dim 64, 3 query
    heads per KV head), where bf16 kernels sum a row's attention in an order that depends on its
    columns' alignment; smaller logits than the fixture's, so near-ties happen."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_char_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=192, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(1)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(10)
    model.generation_config.eos_token_id = tok.eos_token_id
    return FrozenLM(model.to(dtype), tok, ModelSpec("tiny"))


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def lm(request):
    return attention_shaped_lm(request.param)


@pytest.fixture(scope="module")
def prompts(lm):
    """Twelve chats of 12 distinct lengths (prompts of 21-88 tokens, as the character tokenizer counts)."""
    rng = random.Random(0)
    alphabet = "abcdefghij0123456789+-*= ?"
    questions = ["".join(rng.choice(alphabet) for _ in range(n)) for n in (1, 5, 9, 14, 20, 26, 33, 40, 48, 55, 61, 68)]
    return lm.encode_chat([[{"role": "user", "content": q}] for q in questions])


def _greedy_rows(lm, prompts, batches, budgets=None) -> dict[int, list[int]]:
    """Tokens of every row when ``batches`` (lists of prompt indices) are decoded one after another;
    ``budgets`` (prompt index -> tokens) shortens some rows so they finish before their mates."""
    rows = {}
    for batch in batches:
        budget = [budgets.get(i, TOKENS) if budgets else TOKENS for i in batch]
        result = decode(lm, [prompts[i] for i in batch], ActionSet([GREEDY]), row_actions=0, token_budget=budget)
        for slot, i in enumerate(batch):
            if not budgets or i not in budgets:
                rows[i] = result.tokens[slot, : result.lengths[slot]].tolist()
    return rows


def test_a_row_decodes_the_same_alone_and_in_any_batch(lm, prompts):
    n = len(prompts)
    alone = _greedy_rows(lm, prompts, [[i] for i in range(n)])
    assert len({tuple(t) for t in alone.values()}) > n // 2  # the rows differ: a test that can fail
    reversed_rows = list(range(n))[::-1]
    compositions = {
        "one batch": [list(range(n))],
        "reversed, in threes": [reversed_rows[s:s + 3] for s in range(0, n, 3)],
        "short with long": [[0, 11, 1, 10], [2, 9, 3, 8, 4, 7, 5, 6]],
        "pairs": [[i, (i + 5) % n] for i in range(0, n, 2)] + [[i, (i + 2) % n] for i in range(1, n, 2)],
    }
    for name, batches in compositions.items():
        assert _greedy_rows(lm, prompts, batches) == alone, name


def test_mates_that_finish_early_or_share_the_prompt_change_nothing(lm, prompts):
    n = len(prompts)
    alone = _greedy_rows(lm, prompts, [[i] for i in (3, 8)])
    # rows 3 and 8 decode with mates that stop after 1-5 tokens (the batch shrinks under them)
    batch = [0, 3, 5, 8, 11, 1]
    early = _greedy_rows(lm, prompts, [batch], budgets={0: 1, 5: 3, 11: 5, 1: 2})
    assert early == alone
    # the same prompt fanned out to several rows beside every other prompt
    result = decode(lm, prompts, ActionSet([GREEDY]), prompt_of_row=[3] * 3 + list(range(n)) + [8] * 2,
                    row_actions=0, token_budget=TOKENS)
    rows = [result.tokens[r, : result.lengths[r]].tolist() for r in range(len(result.texts))]
    assert rows[:3] == [alone[3]] * 3 and rows[-2:] == [alone[8]] * 2 and rows[3 + 3] == alone[3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_linear_kernel_gives_a_row_the_same_result_at_every_batch_size(dtype):
    """What the invariance rests on, checked on the machine that runs the tests: the LM's linear
    kernel (``FrozenLM.linear``) computes a row to the same bits whatever the number of rows around
    it (every call is on tiles of the same number of rows; ``tests/lm/test_row_tiles.py`` checks every
    row at every position)."""
    tiny = make_tiny_lm(hidden_size=64)
    lm = FrozenLM(copy.deepcopy(tiny.model).to(dtype), tiny.tokenizer, ModelSpec("tiny"))
    gen = torch.Generator().manual_seed(0)
    for out_features, in_features in ((64, 64), (128, 64), (64, 128), (lm.vocab_size, 64)):
        weight = torch.randn(out_features, in_features, generator=gen).to(dtype)
        x = torch.randn(70, 1, in_features, generator=gen).to(dtype)
        first = lm.linear(x[:1], weight, None)
        for rows in range(2, 71):
            assert torch.equal(lm.linear(x[:rows], weight, None)[:1], first), rows


def test_a_rows_cache_columns_do_not_depend_on_its_mates(lm, prompts):
    """The attention kernels see a row's keys and values in the same columns whatever its batch:
    bf16 dot products sum neighbouring columns in pairs, so a row shifted by its mates' longer prompts
    (left padding) sums its attention in another order, a difference too rare to show in a tiny
    model's tokens but seen on the default model."""
    with torch.inference_mode():
        _, _, alone = lm.start_decode([prompts[3]], None, max_new_tokens=8)
        _, _, batch = lm.start_decode([prompts[11], prompts[3], prompts[0]], None, max_new_tokens=8)
        for state in (alone, batch):  # two steps with fixed tokens
            for token in (5, 9):
                state.step(torch.full((state.cache.live,), token))
    length = len(prompts[3]) + 2
    a, b = alone.cache, batch.cache
    assert int(a.columns[0]) == int(b.columns[1]) == length
    assert torch.equal(a.valid[0, :length], b.valid[1, :length]) and a.valid[0, :length].all()
    assert not b.valid[1, length:].any()
    assert torch.equal(a.keys[:, 0, :, :length], b.keys[:, 1, :, :length])
    assert torch.equal(a.values[:, 0, :, :length], b.values[:, 1, :, :length])


def test_only_the_prompts_some_row_decodes_are_prefilled(lm, prompts):
    """A later round of attempts names a few of many prompts: only those are prefilled, and their rows
    get the same tokens as when only those prompts are given."""
    seen = []
    start_decode = lm.start_decode
    lm.start_decode = lambda batch, *args, **kwargs: seen.append(len(batch)) or start_decode(batch, *args, **kwargs)
    try:
        result = decode(lm, prompts, ActionSet([GREEDY]), prompt_of_row=[9, 2, 9], row_actions=0, token_budget=TOKENS)
    finally:
        del lm.start_decode
    assert seen == [2] and result.prompt_of_row.tolist() == [9, 2, 9] and len(result.prompts) == len(prompts)
    alone = _greedy_rows(lm, prompts, [[2], [9]])
    rows = [result.tokens[r, : result.lengths[r]].tolist() for r in range(3)]
    assert rows == [alone[9], alone[2], alone[9]]
