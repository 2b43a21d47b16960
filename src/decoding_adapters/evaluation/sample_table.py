"""A stored table of samples: per problem, per arm (a decoding action), per sample, what the fixed
answer rules (``evaluation.rules``) and a learned attempt policy read.

Arms: the greedy arm is deterministic, so it is decoded once per problem and its one sample fills
all ``N`` slots (``SampleTable.distinct`` says 1); a sampled arm is decoded ``N`` times, each row with
its own seed ``row_seed(seed, problem id, action name, sample index, "draft-table")`` (the key the
draft-gated adapter's both-arms table uses, so the same settings give the same samples there), so
every rule scored from one table sees the same samples (common random numbers).

Per sample ``[P, A, N]``: the extracted answer as an id per problem (``answers``, -1: no answer; the
strings in ``answer_strings[p][id]``, ids in order of first appearance over arms then samples), the
reward and whether it is correct (reward >= 0.5), the generated tokens (EOS included), a confidence
summary ``[P, A, N, C]`` (``CONFIDENCE_FEATURES``) and, optionally, the mean hidden state
``[P, A, N, H]``. Every sample ends at the task's first complete answer (``Task.answer_complete``),
the protocol, unless the table is built with ``stop_at_answer=False`` (its header says).

The confidence numbers come from the logits each token was sampled from (the LM head applied to the
hidden state the decode recorded), under the model's own distribution (temperature 1, no top-k):
- ``max_prob_mean`` / ``max_prob_min``: the mean / lowest top-1 probability over the tokens;
- ``entropy_mean``: the mean entropy;
- ``logprob_mean``: the mean log-probability of the generated tokens;
- ``token_conf_mean``: DeepConf's token confidence ``C_i = -mean_{j<=k} log P_i(j)`` (the ``k`` most
  likely tokens, ``conf_top_k``), averaged over the trace;
- ``group_conf_min``: DeepConf's lowest group confidence, the least mean of ``C_i`` over sliding
  windows of ``group_window`` tokens (one window, the whole trace, when shorter);
- ``group_conf_bottom10``: the mean of the lowest 10% of those windows (at least one);
- ``tail_conf``: the mean ``C_i`` over the last ``group_window`` tokens;
- ``answer_logprob``: the summed log-probability of the answer's own tokens (the shortest run of
  final tokens whose text holds the extracted answer, at most 32), NaN without an answer;
- ``answer_prob_min``: the least probability among those tokens, NaN without an answer.

Optionally (``checkpoints=m``; off by default, and then the header and the chunks are what they
were without it), each sample's readings at checkpoints every ``m`` tokens ("state m",
``decoding.checkpoints``): ``prefix_confidence [P, A, N, K, C]`` (the confidence summary of its first
``t_c = (c + 1) m`` tokens, NaN where the sample ended at or before ``t_c``) and, with hidden states,
``prefix_hidden [P, A, N, K, H]`` (their mean hidden state); the header's ``checkpoints`` is ``m``.

Storage: a ``decoding.grid.ChunkDirectory``: ``header.json`` (task, split, model fingerprint, actions,
N, budget, seed, stop, confidence settings), ``plan.json`` (the problems asked for) and one
``chunk-XXXXX.npz`` (compressed arrays) plus ``chunk-XXXXX.json`` (problem ids and answer strings) per
chunk of problems, each written atomically, so a kill loses at most the chunk being decoded and a
rerun resumes (a table made under other settings is refused). Rows and seeds are the grid's
(``decoding.grid.Grid``); a damaged chunk is refused in one line naming its file.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..core.files import write_json
from ..core.stats import pass_at_k
from ..decoding.actions import GREEDY, DecodingAction
from ..decoding.checkpoints import checkpoint_tokens, prefix_readings
from ..decoding.confidence import (  # re-exported: they were defined here first
    CONFIDENCE_FEATURES,
    ConfidenceConfig,
    answer_ids,
    confidence_summary,
    trace_readings,
)
from ..decoding.grid import SAMPLE_SEED_TAG, ChunkDirectory, Grid, decode_rows, fill_chunks, group_chunks
from ..decoding.protocol import STOP_AT_ANSWER
from ..decoding.rollouts import encode_problems
from ..decoding.table_engines import LocalChunks
from ..decoding.teacher_forced import decode_rows_elsewhere

__all__ = [
    "CONFIDENCE_FEATURES",
    "TABLE_FORMAT",
    "ConfidenceConfig",
    "SampleTable",
    "unfinished",
    "build_sample_table",
    "confidence_summary",
    "answer_ids",
    "pass_at_k_curve",
    "synthetic_sample_table",
    "from_draft_table",
]

TABLE_FORMAT = "decoding-adapters/sample-table"


# ---- the table --------------------------------------------------------------------------------------


@dataclass
class SampleTable:
    """Arrays over problems ``P``, arms ``A``, samples ``N`` (module docstring)."""

    header: dict
    """task, split, model, actions, samples, token_budget, seed, stop_at_answer, confidence settings."""
    problem_ids: list[str]
    answers: np.ndarray
    """``[P, A, N]`` int32 answer id per problem, -1: no answer."""
    answer_strings: list[list[str]]
    """Per problem, the answer string of each id."""
    rewards: np.ndarray
    """``[P, A, N]`` float32 the task's reward."""
    tokens: np.ndarray
    """``[P, A, N]`` int32 generated tokens (EOS included)."""
    confidence: np.ndarray
    """``[P, A, N, C]`` float32, columns ``confidence_names``."""
    hidden: np.ndarray | None = None
    """``[P, A, N, H]`` float16 mean hidden state over the generated tokens, or None."""
    confidence_names: tuple[str, ...] = CONFIDENCE_FEATURES
    prefix_confidence: np.ndarray | None = None
    """``[P, A, N, K, C]`` float32 the confidence summary at each checkpoint (NaN: not reached), or None."""
    prefix_hidden: np.ndarray | None = None
    """``[P, A, N, K, H]`` float16 the mean hidden state at each checkpoint (zeros: not reached), or None."""

    def __post_init__(self) -> None:
        shape = self.answers.shape
        if len(shape) != 3 or self.rewards.shape != shape or self.tokens.shape != shape:
            raise ValueError(f"answers, rewards and tokens must share one [P, A, N] shape, got {shape}, "
                             f"{self.rewards.shape}, {self.tokens.shape}")
        if self.confidence.shape[:3] != shape or self.confidence.shape[3] != len(self.confidence_names):
            raise ValueError(f"confidence must be [P, A, N, {len(self.confidence_names)}], got {self.confidence.shape}")
        if len(self.problem_ids) != shape[0] or len(self.answer_strings) != shape[0]:
            raise ValueError("one problem id and one answer list per problem")
        if self.hidden is not None and self.hidden.shape[:3] != shape:
            raise ValueError(f"hidden must be [P, A, N, H], got {self.hidden.shape}")
        if self.prefix_confidence is not None:
            k = self.prefix_confidence.shape[3:4]
            if self.prefix_confidence.shape != shape + tuple(k) + (len(self.confidence_names),):
                raise ValueError(f"prefix_confidence must be [P, A, N, K, C], got {self.prefix_confidence.shape}")
            if self.prefix_hidden is not None and self.prefix_hidden.shape[:4] != self.prefix_confidence.shape[:4]:
                raise ValueError(f"prefix_hidden must be [P, A, N, K, H], got {self.prefix_hidden.shape}")
        elif self.prefix_hidden is not None:
            raise ValueError("prefix_hidden needs prefix_confidence")

    # -- views --
    @property
    def correct(self) -> np.ndarray:
        """``[P, A, N]`` bool: the sample is right (reward >= 0.5)."""
        return self.rewards >= 0.5

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.answers.shape)  # type: ignore[return-value]

    @property
    def actions(self) -> list[DecodingAction]:
        return [DecodingAction.from_dict(a) for a in self.header["actions"]]

    @property
    def arm_names(self) -> list[str]:
        return [a.name for a in self.actions]

    @property
    def distinct(self) -> np.ndarray:
        """``[A]`` distinct samples per arm: 1 for greedy (its one sample repeated), N otherwise."""
        n = self.shape[2]
        return np.array([1 if a.is_greedy else n for a in self.actions])

    def arm(self, name_or_index: str | int) -> int:
        if isinstance(name_or_index, int):
            return name_or_index
        names = self.arm_names
        if name_or_index in names:
            return names.index(name_or_index)
        if name_or_index == "greedy":
            greedy = [i for i, a in enumerate(self.actions) if a.is_greedy]
            if greedy:
                return greedy[0]
        raise ValueError(f"no arm {name_or_index!r} in the table (it has {names})")

    @property
    def checkpoint_every(self) -> int:
        """Tokens between checkpoints (``m``; 0: the table stores none)."""
        return int(self.header.get("checkpoints", 0) or 0)

    @property
    def checkpoint_tokens(self) -> list[int]:
        """``[K]`` the token count of each checkpoint (empty without checkpoints)."""
        every = self.checkpoint_every
        return checkpoint_tokens(every, int(self.header["token_budget"])) if every else []

    def feature(self, name: str) -> np.ndarray:
        """``[P, A, N]`` one confidence column."""
        return self.confidence[..., self.confidence_names.index(name)]

    def answer_correct(self) -> np.ndarray:
        """``[P, K]`` bool: answer id k of problem p is right (K: the most distinct answers of a
        problem; ids a problem lacks are False). Read from the samples that gave each answer."""
        p, a, n = self.shape
        k = max(1, int(self.answers.max(initial=-1)) + 1)
        out = np.zeros((p, k + 1), dtype=bool)  # column k: "no answer", never right
        ids = np.where(self.answers >= 0, self.answers, k).reshape(p, a * n)
        np.logical_or.at(out, (np.repeat(np.arange(p), a * n), ids.reshape(-1)), self.correct.reshape(-1))
        return out[:, :k]

    def subset(self, rows: Sequence[int] | np.ndarray) -> "SampleTable":
        """The table of some problems (rows in this order)."""
        rows = np.asarray(rows, dtype=np.int64)
        return SampleTable(dict(self.header), [self.problem_ids[i] for i in rows], self.answers[rows],
                           [self.answer_strings[i] for i in rows], self.rewards[rows], self.tokens[rows],
                           self.confidence[rows], None if self.hidden is None else self.hidden[rows],
                           self.confidence_names, _pick(self.prefix_confidence, rows), _pick(self.prefix_hidden, rows))

    # -- files --
    def save(self, path: str | Path) -> Path:
        """Write as a directory of one chunk (``load`` reads it; ``build_sample_table`` resumes it)."""
        store = ChunkDirectory(path)
        store.path.mkdir(parents=True, exist_ok=True)
        store.clear()
        _write_chunk(store, 0, self)
        write_json(store.path / "header.json", self.header)
        write_json(store.path / "plan.json", {"problems": list(self.problem_ids)})
        return store.path

    @classmethod
    def load(cls, path: str | Path) -> "SampleTable":
        """Read a table directory; a damaged chunk (unreadable, answer ids its strings lack, a
        problem another chunk holds, infinite confidences, negative token counts, arrays that do not
        match the header) is refused in one line naming its file."""
        store = ChunkDirectory(path)
        header = store.read_header()
        if header.get("format") != TABLE_FORMAT:
            raise ValueError(f"{store.path} is not a sample table")
        chunks, seen = [], {}
        for i in store.chunk_indices():
            chunk = _read_chunk(store, i, header)
            for pid in chunk.problem_ids:
                if pid in seen:
                    raise ValueError(f"{store.path / f'chunk-{i:05d}.json'}: problem {pid!r} is also in "
                                     f"chunk-{seen[pid]:05d} (a chunk copied under a new index?); delete one")
                seen[pid] = i
            chunks.append(chunk)
        return _concat(header, chunks)


def _pick(array: np.ndarray | None, rows: np.ndarray) -> np.ndarray | None:
    return None if array is None else array[rows]


def unfinished(path: str | Path) -> bool:
    """Whether the table directory at ``path`` lacks problems its last build asked for (a build
    killed part-way); False for a table written before builds recorded what they asked for."""
    return ChunkDirectory(path).unfinished()


def _write_chunk(store: ChunkDirectory, index: int, table: SampleTable) -> None:
    arrays = {"answers": table.answers.astype(np.int32), "rewards": table.rewards.astype(np.float32),
              "tokens": table.tokens.astype(np.int32), "confidence": table.confidence.astype(np.float32)}
    if table.hidden is not None:
        arrays["hidden"] = table.hidden.astype(np.float16)
    if table.prefix_confidence is not None:  # only with checkpoints: a table without them writes what it did
        arrays["prefix_confidence"] = table.prefix_confidence.astype(np.float32)
    if table.prefix_hidden is not None:
        arrays["prefix_hidden"] = table.prefix_hidden.astype(np.float16)
    store.write_chunk(index, arrays, {"problems": table.problem_ids, "answer_strings": table.answer_strings,
                                      "confidence_names": list(table.confidence_names)})


def _read_chunk(store: ChunkDirectory, index: int, header: dict) -> SampleTable:
    meta = store.read_meta(index)
    arrays = store.read_arrays(index)
    file = store.path / f"chunk-{index:05d}.npz"
    try:
        table = SampleTable({}, meta["problems"], arrays["answers"], meta["answer_strings"], arrays["rewards"],
                            arrays["tokens"], arrays["confidence"], arrays.get("hidden"),
                            tuple(meta["confidence_names"]), arrays.get("prefix_confidence"),
                            arrays.get("prefix_hidden"))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise ValueError(f"{file}: damaged ({err}); delete it and its .json to decode its problems again") from None
    problem = _chunk_damage(table, header)
    if problem:
        raise ValueError(f"{file}: {problem}; delete it and its .json to decode its problems again")
    return table


def _chunk_damage(table: SampleTable, header: dict) -> str:
    """What is wrong with a chunk's arrays (empty when nothing): checked before any of them sizes an
    allocation or reaches a rule."""
    _, arms, samples = table.shape
    if (arms, samples) != (len(header.get("actions", [])), int(header.get("samples", samples))):
        return f"its arrays hold {arms} arms x {samples} samples, the header {len(header.get('actions', []))} x " \
               f"{header.get('samples')}"
    checkpoints = len(checkpoint_tokens(int(header["checkpoints"]), int(header["token_budget"]))) \
        if header.get("checkpoints") else 0
    stored = 0 if table.prefix_confidence is None else table.prefix_confidence.shape[3]
    if stored != checkpoints or (checkpoints and (table.prefix_hidden is None) != (table.hidden is None)):
        return f"its arrays hold {stored} checkpoints, the header {checkpoints} (and prefix hidden states where the " \
               "table has hidden states)"
    if table.answers.dtype.kind != "i" or table.tokens.dtype.kind != "i":
        return "answer ids and token counts must be integers"
    counts = np.array([len(s) for s in table.answer_strings]).reshape(-1, 1, 1)
    if ((table.answers < -1) | (table.answers >= counts)).any():
        return f"answer ids out of range (from {int(table.answers.min())} to {int(table.answers.max())}; " \
               "each must be -1 or index its problem's answer strings)"
    if (table.tokens < 0).any():
        return f"negative token counts ({int(table.tokens.min())})"
    if np.isinf(table.confidence).any():
        return "infinite confidences"
    if not np.isfinite(table.rewards).all():
        return "rewards that are not finite"
    return ""


def _concat(header: dict, chunks: list[SampleTable]) -> SampleTable:
    a, n = len(header["actions"]), int(header["samples"])
    names = tuple(chunks[0].confidence_names) if chunks else CONFIDENCE_FEATURES
    if not chunks:
        return SampleTable(header, [], np.zeros((0, a, n), np.int32), [], np.zeros((0, a, n), np.float32),
                           np.zeros((0, a, n), np.int32), np.zeros((0, a, n, len(names)), np.float32), None, names)
    def joined(name: str) -> np.ndarray | None:
        parts = [getattr(c, name) for c in chunks]
        return np.concatenate(parts) if all(x is not None for x in parts) else None

    return SampleTable(header, [i for c in chunks for i in c.problem_ids], np.concatenate([c.answers for c in chunks]),
                       [s for c in chunks for s in c.answer_strings], np.concatenate([c.rewards for c in chunks]),
                       np.concatenate([c.tokens for c in chunks]), np.concatenate([c.confidence for c in chunks]),
                       joined("hidden"), names, joined("prefix_confidence"), joined("prefix_hidden"))


# ---- building -----------------------------------------------------------------------------------------


def _header(task, lm, split: str, actions: Sequence[DecodingAction], samples: int, token_budget: int, seed: int,
            stop_at_answer: bool, config: ConfidenceConfig, hidden: bool, checkpoints: int = 0) -> dict:
    header = {"format": TABLE_FORMAT, "version": 1, "task": getattr(task, "name", ""), "split": split,
            "model": lm.fingerprint(), "actions": [a.to_dict() for a in actions], "samples": samples,
            "token_budget": token_budget, "seed": seed, "stop_at_answer": stop_at_answer,
            "confidence": {"conf_top_k": config.conf_top_k, "group_window": config.group_window,
                           "features": list(CONFIDENCE_FEATURES)}, "hidden": hidden}
    if checkpoints:  # absent when off: a table without checkpoints keeps the header it always had
        header["checkpoints"] = checkpoints
    return header


def build_sample_table(lm, task, problems, actions: Sequence[DecodingAction], *, samples: int, token_budget: int,
                       path: str | Path, split: str, seed: int = 0, stop_at_answer: bool = STOP_AT_ANSWER,
                       chunk_problems: int = 16, confidence: ConfidenceConfig | None = None,
                       hidden: bool = False, progress: bool = True,
                       on_chunk: Callable[[int, int], None] | None = None, engine=None,
                       checkpoints: int = 0) -> SampleTable:
    """Decode ``problems`` under every arm of ``actions`` (greedy once, a sampled arm ``samples`` times)
    into the table directory ``path``, chunk by chunk (resumable: problems already there are kept; a
    table made under other settings is refused; the problems asked for are the table's plan, so a
    killed build reads as unfinished). ``stop_at_answer``: each sample ends at its first complete
    answer (the protocol; off: decoded to EOS or the budget). ``checkpoints``: store each sample's
    readings every that many tokens (module docstring; 0: none)."""
    if checkpoints < 0:
        raise ValueError(f"checkpoints must be >= 0 tokens, got {checkpoints}")
    if samples < 1 or not actions:
        raise ValueError("a sample table needs samples >= 1 and at least one action")
    actions = list(actions)
    if len({a.name for a in actions}) != len(actions):
        raise ValueError("the arms' actions must be distinct")
    store = ChunkDirectory(path)
    confidence = confidence or ConfidenceConfig()
    header = _header(task, lm, split, actions, samples, token_budget, seed, stop_at_answer, confidence, hidden,
                     checkpoints)
    if getattr(engine, "rows_from", None):  # rows from another engine's streams do not mix with the loop's
        header["rows_from"] = engine.rows_from
    if store.has_header() and store.read_header() != json.loads(json.dumps(header)):
        raise ValueError(f"{path} was decoded under other settings: {_differences(store.read_header(), header)}")
    store.open(header, [p.id for p in problems])
    done_chunks = store.chunk_indices()
    done = set(store.stored_ids())
    todo = [p for p in problems if p.id not in done]
    first_index = (max(done_chunks) + 1) if done_chunks else 0
    grid = Grid(tuple(actions), samples, seed, SAMPLE_SEED_TAG)
    chunks = group_chunks(todo, chunk_problems)
    # a chunk's file index is its place in the plan, not when it finished (workers finish out of order)
    index_of = {chunk[0].id: first_index + i for i, chunk in enumerate(chunks)}
    decode = functools.partial(_decode_chunk, grid=grid, token_budget=token_budget, stop_at_answer=stop_at_answer,
                               config=confidence, with_hidden=hidden, checkpoints=checkpoints)
    with tqdm(total=len(problems), initial=len(problems) - len(todo), desc="sample table", unit="problem",
              disable=not progress) as bar:
        def write(table: SampleTable) -> None:
            _write_chunk(store, index_of[table.problem_ids[0]], table)
            bar.update(len(table.problem_ids))

        fill_chunks(chunks, decode, write, on_chunk, size=len, engine=engine or LocalChunks(lm, task))
    table = SampleTable.load(path)
    order = {pid: i for i, pid in enumerate(table.problem_ids)}
    return table.subset([order[p.id] for p in problems if p.id in order])


_SETTING_OPTIONS = {"actions": "--temperatures or --decoders", "samples": "--samples", "token_budget": "--token-budget",
                    "seed": "--seed", "stop_at_answer": "--stop-at-answer / --no-stop-at-answer",
                    "hidden": "--hidden / --no-hidden", "model": "--model (and --dtype)", "task": "--task",
                    "rows_from": "--backend"}


def _arm_names(actions):
    try:
        return [DecodingAction.from_dict(a).name for a in actions]
    except (TypeError, ValueError, KeyError, AttributeError):  # a damaged header: shown as it is
        return actions


def _differences(stored: dict, wanted: dict) -> str:
    """Each header field that differs, the table's value against this run's, and the option that sets it."""
    out = []
    for key in sorted(set(stored) | set(wanted), key=lambda k: list(wanted).index(k) if k in wanted else 99):
        old, new = stored.get(key), json.loads(json.dumps(wanted.get(key)))
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):  # the model fingerprint, the confidence settings
            keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            old, new = {k: old.get(k) for k in keys}, {k: new.get(k) for k in keys}
        if key == "actions":
            old, new = _arm_names(old), _arm_names(new)
        option = f" (set by {_SETTING_OPTIONS[key]})" if key in _SETTING_OPTIONS else ""
        out.append(f"{key}: the table has {old}, this run {new}{option}")
    return "; ".join(out) + ". Give the table's settings to read or extend it, or choose another table directory"


def _decode_chunk(lm, task, problems, grid: Grid, token_budget: int, stop_at_answer: bool, config: ConfidenceConfig,
                  with_hidden: bool, checkpoints: int = 0, rollouts=None) -> SampleTable:
    prompts, _ = encode_problems(lm, task, problems, seed=grid.seed)
    rows = grid.rows(len(problems))  # a greedy arm: one row filling every slot
    rows_of = decode_rows if rollouts is None else functools.partial(decode_rows_elsewhere, rollouts)
    result, rewards = rows_of(lm, task, problems, prompts, grid, rows, token_budget=token_budget,
                              stop_at_answer=stop_at_answer, record_features=True)
    row_problems = [problems[r.problem] for r in rows]
    answers = [task.extract_answer(p, text) for p, text in zip(row_problems, result.texts)]
    summary, hidden = trace_readings(lm, result, answers, config, with_hidden)
    shape = (len(problems), len(grid.actions), grid.samples)
    out_answers = np.full(shape, -1, np.int32)
    out_rewards = np.zeros(shape, np.float32)
    out_tokens = np.zeros(shape, np.int32)
    out_conf = np.zeros(shape + (summary.shape[1],), np.float32)
    out_hidden = np.zeros(shape + (hidden.shape[1],), np.float16) if hidden is not None else None
    strings: list[list[str]] = []
    by_problem: dict[int, list[int]] = {}
    for r, row in enumerate(rows):
        by_problem.setdefault(row.problem, []).append(r)
    for i in range(len(problems)):
        ids, names = answer_ids([answers[r] for r in by_problem[i]])
        strings.append(names)
        for r, answer_id in zip(by_problem[i], ids):
            slots = list(rows[r].slots)
            arm = rows[r].action
            out_answers[i, arm, slots] = answer_id
            out_rewards[i, arm, slots] = rewards[r]
            out_tokens[i, arm, slots] = int(result.lengths[r])
            out_conf[i, arm, slots] = summary[r].numpy()
            if out_hidden is not None:
                out_hidden[i, arm, slots] = hidden[r].numpy()
    prefix = _prefix_arrays(lm, result, rows, shape, checkpoints, token_budget, config, with_hidden)
    return SampleTable({}, [pr.id for pr in problems], out_answers, strings, out_rewards, out_tokens, out_conf,
                       out_hidden, CONFIDENCE_FEATURES, *prefix)


def _prefix_arrays(lm, result, rows, shape: tuple[int, int, int], every: int, token_budget: int,
                   config: ConfidenceConfig, with_hidden: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``[P, A, N, K, C]`` and ``[P, A, N, K, H]`` the rows' readings at each checkpoint (module
    docstring; NaN / zeros where a row ended at or before it), or Nones without checkpoints."""
    if not every:
        return None, None
    marks = checkpoint_tokens(every, token_budget)
    conf = np.full(shape + (len(marks), len(CONFIDENCE_FEATURES)), np.nan, np.float32)
    hid = np.zeros(shape + (len(marks), result.features.shape[-1]), np.float16) if with_hidden else None
    for c, t in enumerate(marks):
        going = [r for r in range(len(rows)) if int(result.lengths[r]) > t]  # the rows still running after t tokens
        if not going:
            continue
        summary, mean = prefix_readings(lm, result.tokens[going, :t], result.features[going, :t], config, with_hidden)
        for k, r in enumerate(going):
            row = rows[r]
            conf[row.problem, row.action, list(row.slots), c] = summary[k].numpy()
            if hid is not None:
                hid[row.problem, row.action, list(row.slots), c] = mean[k].numpy()
    return conf, hid


def pass_at_k_curve(table: SampleTable, arm: str | int, ks: Sequence[int]) -> dict[int, float]:
    """Mean unbiased pass@k over problems from one arm's distinct samples (k <= its distinct count)."""
    index = table.arm(arm)
    n = int(table.distinct[index])
    correct = table.correct[:, index, :n].sum(1)
    return {k: float(np.mean([pass_at_k(n, int(c), k) for c in correct])) for k in ks if 1 <= k <= n}


def synthetic_sample_table(problems: int, samples: int = 8, arms: Sequence[DecodingAction] | None = None,
                           seed: int = 0, wrong_answers: int = 4, hidden_size: int = 0) -> SampleTable:
    """A random table in the real shapes (benchmarks, tests): per problem a chance ``q`` that a
    sample is right (uniform), answer 0 right and ``wrong_answers`` wrong ones, confidences higher on
    right samples; the greedy arm (first, when ``arms`` holds it) repeats one sample."""
    arms = list(arms) if arms is not None else [GREEDY, DecodingAction(temperature=0.5)]
    gen = np.random.default_rng(seed)
    shape = (problems, len(arms), samples)
    q = gen.uniform(0.05, 0.95, size=(problems, 1, 1))
    right = gen.random(shape) < q
    answers = np.where(right, 0, gen.integers(1, wrong_answers + 1, size=shape)).astype(np.int32)
    answers[gen.random(shape) < 0.03] = -1  # a few samples state no answer
    tokens = gen.integers(8, 64, size=shape).astype(np.int32)
    signal = right.astype(np.float32) * 0.8 + gen.normal(0, 1, size=shape + (len(CONFIDENCE_FEATURES),)).transpose(
        3, 0, 1, 2)
    confidence = np.stack([np.abs(s) + 0.5 for s in signal], axis=-1).astype(np.float32)
    hidden = gen.normal(size=shape + (hidden_size,)).astype(np.float16) if hidden_size else None
    for a, action in enumerate(arms):
        if action.is_greedy:  # deterministic: one sample in every slot
            for array in (answers, tokens, confidence, right) + ((hidden,) if hidden is not None else ()):
                array[:, a] = array[:, a, :1]
    rewards = ((answers == 0) & (answers >= 0)).astype(np.float32)
    header = {"format": TABLE_FORMAT, "version": 1, "task": "synthetic", "split": "synthetic", "model": {},
              "actions": [a.to_dict() for a in arms], "samples": samples, "token_budget": 64, "seed": seed,
              "stop_at_answer": True, "confidence": {"features": list(CONFIDENCE_FEATURES)},
              "hidden": hidden is not None}
    strings = [[str(i) for i in range(wrong_answers + 1)] for _ in range(problems)]
    return SampleTable(header, [f"synthetic/{i}" for i in range(problems)], answers, strings, rewards, tokens,
                       confidence, hidden)


def from_draft_table(table) -> SampleTable:
    """A draft-gated adapter's both-arms table (``training.draft.DraftTable``) as a sample table, so
    the rules score the samples a draft trainer already decoded: the greedy draft is the greedy arm,
    each re-decode action a sampled arm. A draft table keeps fewer readings: the draft's mean and
    least max-probability and mean entropy, the re-decodes' mean max-probability; the other
    confidence columns are NaN (the rules read a NaN as the least confident), and no hidden state."""
    header = table.header
    actions = [GREEDY] + table.actions
    samples = int(header["samples"])
    ids = table.problem_ids
    p, a = len(ids), len(actions)
    shape = (p, a, samples)
    answers = np.full(shape, -1, np.int32)
    rewards = np.zeros(shape, np.float32)
    tokens = np.zeros(shape, np.int32)
    confidence = np.full(shape + (len(CONFIDENCE_FEATURES),), np.nan, np.float32)
    column = CONFIDENCE_FEATURES.index
    strings = []
    for i, pid in enumerate(ids):
        record = table.records[pid]
        draft = record["draft"]
        rows = [draft] + [s for action in table.actions for s in record["samples"][action.name][:samples]]
        row_ids, names = answer_ids([r.get("answer") or "" for r in rows])
        strings.append(names)
        answers[i, 0], rewards[i, 0], tokens[i, 0] = row_ids[0], draft["reward"], draft["length"]
        # the draft summary's columns: entropy mean, entropy max, max-prob mean, max-prob min, ...
        summary = draft.get("confidence") or []
        if len(summary) >= 4:
            confidence[i, 0, :, column("entropy_mean")] = summary[0]
            confidence[i, 0, :, column("max_prob_mean")] = summary[2]
            confidence[i, 0, :, column("max_prob_min")] = summary[3]
        r = 1
        for arm in range(1, a):
            for j in range(samples):
                sample = rows[r]
                answers[i, arm, j], rewards[i, arm, j] = row_ids[r], sample["reward"]
                tokens[i, arm, j] = sample["length"]
                if sample.get("confidence") is not None:
                    confidence[i, arm, j, column("max_prob_mean")] = sample["confidence"]
                r += 1
    new_header = {"format": TABLE_FORMAT, "version": 1, "task": header.get("task", ""),
                  "split": header.get("split", ""), "model": header.get("model", {}),
                  "actions": [x.to_dict() for x in actions], "samples": samples,
                  "token_budget": header.get("token_budget"), "seed": header.get("seed"),
                  "stop_at_answer": bool(header.get("draft_stop_at_answer") and header.get("redecode_stop_at_answer")),
                  "confidence": {"features": list(CONFIDENCE_FEATURES)}, "hidden": False, "from": "draft-table"}
    return SampleTable(new_header, list(ids), answers, strings, rewards, tokens, confidence, None)
