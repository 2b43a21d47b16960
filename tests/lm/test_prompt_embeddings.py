"""Prompt embeddings: batched in length order, returned in the caller's order."""

import torch


def test_embeddings_come_back_in_prompt_order_and_match_one_prompt_at_a_time(tiny_lm, tiny_prompts):
    prompts = tiny_prompts + tiny_prompts[::-1]  # lengths out of order, so sorting moves rows
    batched = tiny_lm.prompt_embeddings(prompts, batch_size=3)
    alone = torch.cat([tiny_lm.prompt_embeddings([p]) for p in prompts])
    assert batched.shape == (len(prompts), tiny_lm.hidden_size)
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)
    last = tiny_lm.prompt_embeddings(prompts, pooling="last", batch_size=3)
    torch.testing.assert_close(last, torch.cat([tiny_lm.prompt_embeddings([p], pooling="last") for p in prompts]),
                               atol=1e-5, rtol=1e-5)
