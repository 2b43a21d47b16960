"""``decode(..., on_step=...)``: the per-step report streaming is built on, and early stops it may ask for."""

import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.decoding.loop import StepFeatures, StepTokens, decode

TOKEN_ACTIONS = ActionSet(PRESETS["math-token"])
ROWS = dict(prompt_of_row=[0, 0, 1, 1, 2, 3], row_seeds=[11, 12, 13, 14, 15, 16], token_budget=[3, 16, 5, 16, 1, 9])


def _alternating(features: StepFeatures) -> torch.Tensor:
    """A chooser whose action depends on the row and the step (so reported actions can be checked)."""
    return (features.rows + features.step) % len(TOKEN_ACTIONS)


def test_reported_tokens_rebuild_the_result_and_change_nothing(tiny_lm, tiny_prompts):
    plain = decode(tiny_lm, tiny_prompts, TOKEN_ACTIONS, chooser=_alternating, **ROWS)
    seen: dict[int, list[tuple[int, int, bool, bool]]] = {r: [] for r in range(6)}
    steps = []

    def on_step(s: StepTokens):
        steps.append(s.step)
        assert s.rows.device.type == "cpu" and s.tokens.shape == s.rows.shape == s.finished.shape
        for r, tok, act, fin, eos in zip(s.rows.tolist(), s.tokens.tolist(), s.actions.tolist(), s.finished.tolist(),
                                         s.at_eos.tolist()):
            seen[r].append((tok, act, fin, eos))
        return None

    streamed = decode(tiny_lm, tiny_prompts, TOKEN_ACTIONS, chooser=_alternating, on_step=on_step, **ROWS)
    assert torch.equal(streamed.tokens, plain.tokens) and torch.equal(streamed.actions, plain.actions)
    assert steps == list(range(len(steps))) and len(steps) == int(plain.lengths.max())
    for r in range(6):
        n = int(plain.lengths[r])
        assert [t for t, *_ in seen[r]] == plain.tokens[r, :n].tolist()
        assert [a for _, a, *_ in seen[r]] == plain.actions[r, :n].tolist()
        assert [f for *_, f, _ in seen[r]] == [False] * (n - 1) + [True]  # finished exactly once, at the end
        assert seen[r][-1][3] == bool(plain.stopped_at_eos[r])


def test_rows_asked_to_stop_end_there_and_the_others_are_unaffected(tiny_lm, tiny_prompts):
    budgets = dict(ROWS, token_budget=16)
    plain = decode(tiny_lm, tiny_prompts, TOKEN_ACTIONS, row_actions=[2, 3, 1, 2, 3, 2], **budgets)
    assert int(plain.lengths[1]) > 3 and int(plain.lengths[3]) > 6  # else nothing is stopped early below

    def on_step(s: StepTokens):
        return [1] if s.step == 2 else ([3] if s.step == 5 else [])

    cut = decode(tiny_lm, tiny_prompts, TOKEN_ACTIONS, row_actions=[2, 3, 1, 2, 3, 2], on_step=on_step, **budgets)
    assert int(cut.lengths[1]) == 3 and int(cut.lengths[3]) == 6
    assert not cut.stopped_at_eos[1] and not cut.stopped_at_eos[3]
    assert cut.tokens[1, :3].tolist() == plain.tokens[1, :3].tolist()
    for r in (0, 2, 4, 5):
        assert cut.tokens[r].tolist() == plain.tokens[r].tolist()
