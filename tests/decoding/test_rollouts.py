"""Chunked rollouts give the same rows as one decode, in request order."""

import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import decode, row_seed
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest


def test_chunked_rollouts_equal_one_big_decode(tiny_lm, tiny_prompts):
    aset = ActionSet(PRESETS["mix"])
    prompt_of_row = [3, 0, 1, 0, 2, 3, 1, 0, 2]
    actions = [0, 1, 2, 3, 4, 5, 0, 1, 2]
    seeds = [row_seed(7, r) for r in range(9)]
    request = RolloutRequest(tiny_prompts, prompt_of_row, seeds, 10, actions)
    chunked = HFRollouts(tiny_lm, aset, batch_rows=2).run(request)
    whole = decode(tiny_lm, tiny_prompts, aset, prompt_of_row=prompt_of_row, row_actions=actions, row_seeds=seeds,
                   token_budget=10)
    assert torch.equal(chunked.tokens, whole.tokens)
    assert chunked.texts == whole.texts
    assert chunked.prompt_of_row.tolist() == prompt_of_row


def test_request_validation():
    import pytest

    with pytest.raises(ValueError):
        RolloutRequest([[1]], [0, 0], [1], 4, None)
