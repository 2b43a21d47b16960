"""Row keys: which generation a method uses for (seed, problem, sample). A key names one decoded
row; methods that use the same fixed action share its rows (``StaticKey``), a method that decodes
its own rows has keys of its own (``TokenKey``). Also the keys' JSON form (seed checkpoints)."""

from __future__ import annotations

from typing import NamedTuple, Union

from ..decoding.actions import GREEDY, DecodingAction
from ..decoding.loop import row_seed

__all__ = ["StaticKey", "TokenKey", "Key", "static_key", "mixed_action", "key_json", "key_from_json"]


class StaticKey(NamedTuple):
    """A generation under one fixed action, shared by every method that uses that action for this
    (seed, problem, sample). Greedy is deterministic: ``(GREEDY, 0, problem, 0)`` for all of them
    (unless ``EvalConfig.decode_deterministic_once`` is off)."""

    action: DecodingAction
    seed: int
    problem: int
    """Index into the evaluated problems."""
    sample: int
    stop_at_answer: bool
    """The row ends at its first complete answer (the method's protocol; a row to the budget is a
    generation of its own)."""


class TokenKey(NamedTuple):
    """A generation of a method that decodes its own rows (a token adapter, per-token Mixed, a
    custom rollout), never shared with another method."""

    method: str
    seed: int
    problem: int
    sample: int


Key = Union[StaticKey, TokenKey]


def static_key(action: DecodingAction, s: int, i: int, j: int, once: bool, stop_at_answer: bool) -> StaticKey:
    """The shared row of ``action`` for seed ``s``, problem ``i``, sample ``j``: with ``once``, every
    greedy sample of a problem is the one row of seed 0, sample 0; ``stop_at_answer``: the row ends at its
    first complete answer."""
    if action.is_greedy:
        return StaticKey(GREEDY, 0, i, 0, stop_at_answer) if once else StaticKey(GREEDY, s, i, j, stop_at_answer)
    return StaticKey(action, s, i, j, stop_at_answer)


def mixed_action(actions, base_seed: int, s: int, pid: str, j: int) -> DecodingAction:
    """The action a uniform per-sample mixture over ``actions`` draws for sample ``j`` of problem
    ``pid`` in seed ``s`` (a hash of the row, not a generator: it depends on no other row)."""
    return actions[row_seed(base_seed, s, pid, j, "mixed-action") % len(actions)]


def key_json(key: Key) -> list:
    """A key as JSON: ``["static", action fields, seed, problem, sample, stop]`` or
    ``["token", method, seed, problem, sample]``."""
    if isinstance(key, StaticKey):
        return ["static", key.action.to_dict(), key.seed, key.problem, key.sample, key.stop_at_answer]
    return ["token", key.method, key.seed, key.problem, key.sample]


def key_from_json(item) -> Key:
    """The inverse of :func:`key_json`; anything else is a ValueError."""
    if isinstance(item, list) and len(item) == 6 and item[0] == "static":
        _, action, seed, problem, sample, stop = item
        return StaticKey(DecodingAction.from_dict(action), int(seed), int(problem), int(sample), bool(stop))
    if isinstance(item, list) and len(item) == 5 and item[0] == "token" and isinstance(item[1], str):
        return TokenKey(item[1], int(item[2]), int(item[3]), int(item[4]))
    raise ValueError(f"not a store key: {item!r}")
