"""The packed prefill: prompts of different lengths share one pass over the layers and still get the
bits they get alone.

``FrozenLM.prefill == "packed"`` (the default on a CPU with batch invariance) packs every prompt's
tokens into one matrix for the linear layers (row tiles: a token's bits do not depend on where it
sits) and runs attention per run of equal lengths (a prompt's attention shapes are its own). Checked
on a random Llama with the default model's attention shapes (head_dim 64, 3 query heads per KV head)
in float32 and bf16, eager and SDPA."""

import random

import pytest
import torch

from conftest import make_char_tokenizer
from decoding_adapters.decoding.actions import GREEDY, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.lm.models import FrozenLM, ModelSpec, positions_from_mask


def attention_shaped_lm(dtype: torch.dtype, attention: str = "eager") -> FrozenLM:
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
    model.set_attn_implementation(attention)
    return FrozenLM(model.to(dtype), tok, ModelSpec("tiny"))


def chats(lm: FrozenLM, sizes) -> list[list[int]]:
    rng = random.Random(0)
    alphabet = "abcdefghij0123456789+-*= ?"
    questions = ["".join(rng.choice(alphabet) for _ in range(n)) for n in sizes]
    return lm.encode_chat([[{"role": "user", "content": q}] for q in questions])


def prefilled(lm: FrozenLM, prompts, steps: int = 0):
    """The logits after the prefill (and ``steps`` greedy steps) and the row cache, one row per prompt;
    HF's forward must not run (the packed path is one pass of its own)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the packed prefill ran HF's forward")

    lm.forward = refuse
    try:
        with torch.inference_mode():
            _, logits, state = lm.start_decode(prompts, None, max_new_tokens=4)
            out = [logits]
            for _ in range(steps):
                out.append(state.step(out[-1].argmax(-1))[1])
    finally:
        del lm.forward
    return out, state.cache


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_prompt_gets_the_same_bits_alone_and_packed_with_others(dtype, attention):
    lm = attention_shaped_lm(dtype, attention)
    assert lm.prefill == "packed"
    prompts = chats(lm, (1, 30, 5, 30, 61, 9, 5))  # 5 lengths, two of them twice, not in order
    together, batch = prefilled(lm, prompts, steps=2)
    assert len({tuple(row.argmax(-1).tolist()) for row in together}) > 1
    for row, prompt in enumerate(prompts):
        alone, one = prefilled(lm, [prompt], steps=2)
        assert all(torch.equal(a[0], b[row]) for a, b in zip(alone, together)), row
        length = len(prompt) + 2
        assert torch.equal(one.keys[:, 0, :, :length], batch.keys[:, row, :, :length]), row
        assert torch.equal(one.values[:, 0, :, :length], batch.values[:, row, :, :length]), row


def test_the_packed_prefill_computes_what_hf_forward_computes():
    """Each prompt's logits and cached keys and values agree with HF's forward of that prompt alone
    to float32 rounding, with the same greedy pick."""
    lm = attention_shaped_lm(torch.float32)
    prompts = chats(lm, (3, 17, 40, 17))
    (logits,), cache = prefilled(lm, prompts)
    for row, prompt in enumerate(prompts):
        ids, mask = lm.pad([prompt])
        with torch.inference_mode():
            _, reference, hf_cache = lm.forward(ids, mask, positions_from_mask(mask))
        torch.testing.assert_close(logits[row], reference[0], rtol=1e-4, atol=1e-4)
        assert int(logits[row].argmax()) == int(reference[0].argmax())
        for layer, hf_layer in enumerate(hf_cache.layers):
            torch.testing.assert_close(cache.keys[layer, row, :, :len(prompt)], hf_layer.keys[0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(cache.values[layer, row, :, :len(prompt)], hf_layer.values[0],
                                       rtol=1e-4, atol=1e-4)


def test_the_packed_and_the_length_group_prefills_decode_the_same_greedy_rows():
    lm = attention_shaped_lm(torch.float32)
    prompts = chats(lm, (2, 11, 11, 25, 48))
    rows = {}
    for mode in ("packed", "lengths"):
        lm.prefill = mode
        result = decode(lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=16)
        rows[mode] = [result.tokens[r, : result.lengths[r]].tolist() for r in range(len(prompts))]
    assert rows["packed"] == rows["lengths"]


def test_an_empty_prompt_is_refused():
    lm = attention_shaped_lm(torch.float32)
    with pytest.raises(ValueError, match="at least one token"):
        lm.start_decode([[1, 2], []], None, max_new_tokens=2)
