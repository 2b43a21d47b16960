"""``decode(..., stop_checks=...)``: a row ends at the first token after which its text condition
holds (the "stop at the first answer" baseline), the other rows are unaffected."""

import pytest
import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import decode
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest

ACTIONS = ActionSet(PRESETS["math-token"])  # action 0 is greedy
ROWS = dict(prompt_of_row=[0, 0, 1, 1, 2, 3], row_seeds=[11, 12, 13, 14, 15, 16], token_budget=24)
ROW_ACTIONS = [0, 3, 0, 3, 2, 0]


def test_a_checked_row_ends_after_the_token_that_makes_its_check_true(tiny_lm, tiny_prompts):
    plain = decode(tiny_lm, tiny_prompts, ACTIONS, row_actions=ROW_ACTIONS, **ROWS)
    # A condition each row meets part-way: its text reaches 3 characters (a character tokenizer).
    long_rows = [r for r in range(6) if int(plain.lengths[r]) > 4]
    assert len(long_rows) >= 2  # else nothing is stopped early below
    checks = [(lambda text: len(text) >= 3) if r in long_rows[:2] else None for r in range(6)]
    cut = decode(tiny_lm, tiny_prompts, ACTIONS, row_actions=ROW_ACTIONS, stop_checks=checks, **ROWS)
    for r in range(6):
        if checks[r] is None:
            assert cut.tokens[r].tolist() == plain.tokens[r].tolist() and not cut.stopped_by_check[r]
            continue
        n = int(cut.lengths[r])
        assert cut.tokens[r, :n].tolist() == plain.tokens[r, :n].tolist()  # a prefix of the free row
        assert (cut.tokens[r, n:] == -1).all()  # nothing generated after the stop
        assert bool(cut.stopped_by_check[r]) and not bool(cut.stopped_at_eos[r])
        assert len(cut.texts[r]) >= 3
        shorter = tiny_lm.tokenizer.decode(cut.tokens[r, : n - 1].tolist(), skip_special_tokens=True)
        assert len(shorter) < 3  # the first token at which the check held
    decodes, tokens = cut.row_costs()
    assert decodes.tolist() == [1] * 6 and torch.equal(tokens, cut.lengths)


def test_no_checks_change_nothing_and_checks_need_one_entry_per_row(tiny_lm, tiny_prompts):
    plain = decode(tiny_lm, tiny_prompts, ACTIONS, row_actions=ROW_ACTIONS, **ROWS)
    unchecked = decode(tiny_lm, tiny_prompts, ACTIONS, row_actions=ROW_ACTIONS, stop_checks=[None] * 6, **ROWS)
    assert torch.equal(plain.tokens, unchecked.tokens) and unchecked.stopped_by_check is None
    with pytest.raises(ValueError, match="stop checks"):
        decode(tiny_lm, tiny_prompts, ACTIONS, row_actions=ROW_ACTIONS, stop_checks=[len], **ROWS)


def test_rollouts_carry_the_checks_through_chunks(tiny_lm, tiny_prompts):
    checks = [(lambda text: len(text) >= 2) if r % 2 == 0 else None for r in range(6)]
    request = RolloutRequest(tiny_prompts, ROWS["prompt_of_row"], ROWS["row_seeds"], 24, ROW_ACTIONS, checks)
    whole = HFRollouts(tiny_lm, ACTIONS, batch_rows=64).run(request)
    chunked = HFRollouts(tiny_lm, ACTIONS, batch_rows=2).run(request)
    assert torch.equal(whole.lengths, chunked.lengths) and whole.texts == chunked.texts
    assert torch.equal(whole.stopped_by_check, chunked.stopped_by_check)
    for r in range(0, 6, 2):
        assert bool(whole.stopped_by_check[r]) == (not whole.stopped_at_eos[r] and int(whole.lengths[r]) < 24)
