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

Storage: a directory with ``header.json`` (task, split, model fingerprint, actions, N, budget, seed,
stop, confidence settings) and one ``chunk-XXXXX.npz`` (compressed arrays) plus ``chunk-XXXXX.json``
(problem ids and answer strings) per chunk of problems, each written atomically, so a kill loses at
most the chunk being decoded and a rerun resumes (a table made under other settings is refused).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..core.files import atomic_write, write_json
from ..core.stats import pass_at_k
from ..decoding.actions import GREEDY, ActionSet, DecodingAction
from ..decoding.loop import DecodeResult, decode, row_seed
from ..decoding.rollouts import encode_problems
from ..training.draft import answer_stops

__all__ = [
    "CONFIDENCE_FEATURES",
    "TABLE_FORMAT",
    "ConfidenceConfig",
    "SampleTable",
    "build_sample_table",
    "confidence_summary",
    "answer_ids",
    "pass_at_k_curve",
    "synthetic_sample_table",
]

TABLE_FORMAT = "decoding-adapters/sample-table"

CONFIDENCE_FEATURES = (
    "max_prob_mean",
    "max_prob_min",
    "entropy_mean",
    "logprob_mean",
    "token_conf_mean",
    "group_conf_min",
    "group_conf_bottom10",
    "tail_conf",
    "answer_logprob",
    "answer_prob_min",
)
"""Names of the ``confidence`` columns, in order (module docstring)."""

_ANSWER_TOKENS_MAX = 32


@dataclass(frozen=True)
class ConfidenceConfig:
    """How the confidence summary reads a trace's token distributions."""

    conf_top_k: int = 20
    """DeepConf's token confidence averages the log-probabilities of this many most likely tokens."""
    group_window: int = 16
    """Tokens per sliding window of the group and tail confidences (DeepConf uses 2048 on traces of
    thousands of tokens; a stopped arithmetic answer is tens of tokens)."""

    def __post_init__(self) -> None:
        if self.conf_top_k < 1 or self.group_window < 1:
            raise ValueError("conf_top_k and group_window must be >= 1")


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
                           self.confidence_names)

    # -- files --
    def save(self, path: str | Path) -> Path:
        """Write as a directory of one chunk (``load`` reads it; ``build_sample_table`` resumes it)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("chunk-*"):
            old.unlink()
        _write_chunk(path, 0, self)
        write_json(path / "header.json", self.header)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "SampleTable":
        path = Path(path)
        header = json.loads((path / "header.json").read_text())
        if header.get("format") != TABLE_FORMAT:
            raise ValueError(f"{path} is not a sample table")
        chunks = [_read_chunk(path, i) for i in _chunk_indices(path)]
        return _concat(header, chunks)


def _chunk_indices(path: Path) -> list[int]:
    # a chunk counts once both of its files are there (each is written atomically, the .json last)
    return sorted(int(f.stem.split("-")[1]) for f in path.glob("chunk-*.json") if f.with_suffix(".npz").is_file())


def _write_chunk(path: Path, index: int, table: SampleTable) -> None:
    arrays = {"answers": table.answers.astype(np.int32), "rewards": table.rewards.astype(np.float32),
              "tokens": table.tokens.astype(np.int32), "confidence": table.confidence.astype(np.float32)}
    if table.hidden is not None:
        arrays["hidden"] = table.hidden.astype(np.float16)

    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(path / f"chunk-{index:05d}.npz", write)
    write_json(path / f"chunk-{index:05d}.json", {"problems": table.problem_ids, "answer_strings": table.answer_strings,
                                                  "confidence_names": list(table.confidence_names)})


def _read_chunk(path: Path, index: int) -> SampleTable:
    meta = json.loads((path / f"chunk-{index:05d}.json").read_text())
    with np.load(path / f"chunk-{index:05d}.npz") as data:
        arrays = {k: data[k] for k in data.files}
    return SampleTable({}, meta["problems"], arrays["answers"], meta["answer_strings"], arrays["rewards"],
                       arrays["tokens"], arrays["confidence"], arrays.get("hidden"),
                       tuple(meta["confidence_names"]))


def _concat(header: dict, chunks: list[SampleTable]) -> SampleTable:
    a, n = len(header["actions"]), int(header["samples"])
    names = tuple(chunks[0].confidence_names) if chunks else CONFIDENCE_FEATURES
    if not chunks:
        return SampleTable(header, [], np.zeros((0, a, n), np.int32), [], np.zeros((0, a, n), np.float32),
                           np.zeros((0, a, n), np.int32), np.zeros((0, a, n, len(names)), np.float32), None, names)
    hidden = None
    if all(c.hidden is not None for c in chunks):
        hidden = np.concatenate([c.hidden for c in chunks])
    return SampleTable(header, [i for c in chunks for i in c.problem_ids], np.concatenate([c.answers for c in chunks]),
                       [s for c in chunks for s in c.answer_strings], np.concatenate([c.rewards for c in chunks]),
                       np.concatenate([c.tokens for c in chunks]), np.concatenate([c.confidence for c in chunks]),
                       hidden, names)


# ---- answers and confidences --------------------------------------------------------------------------


def answer_ids(answers: Sequence[str]) -> tuple[list[int], list[str]]:
    """Ids of answer strings in order of first appearance ("" -> -1) and the strings of the ids."""
    strings: list[str] = []
    index: dict[str, int] = {}
    ids = []
    for s in answers:
        if not s:
            ids.append(-1)
            continue
        if s not in index:
            index[s] = len(strings)
            strings.append(s)
        ids.append(index[s])
    return ids, strings


def _sliding_means(values: torch.Tensor, lengths: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Means of ``values [R, T]`` over windows of ``min(window, length)`` tokens ending at each step:
    ``[R, T]`` and a mask of the windows that lie inside the trace."""
    w = lengths.clamp(min=1, max=window).unsqueeze(1)  # [R, 1] each row's window
    csum = torch.cat([torch.zeros_like(values[:, :1]), values.cumsum(1)], dim=1)  # [R, T + 1]
    end = torch.arange(1, values.shape[1] + 1).unsqueeze(0)  # [1, T] window ends after step t
    start = (end - w).clamp(min=0)
    means = (csum.gather(1, end.expand_as(values)) - csum.gather(1, start)) / w
    valid = (end >= w) & (end <= lengths.unsqueeze(1))
    return means, valid


def confidence_summary(step_logprobs: torch.Tensor, token_logprob: torch.Tensor, lengths: torch.Tensor,
                       answer_mask: torch.Tensor, config: ConfidenceConfig) -> torch.Tensor:
    """The ``[R, C]`` summary (``CONFIDENCE_FEATURES``) of ``R`` traces from each step's
    log-probabilities ``[R, T, V]`` (rows past their length ignored), the generated tokens'
    log-probabilities ``[R, T]``, the lengths ``[R]`` and a mask of the answer's own tokens ``[R, T]``."""
    r, t = token_logprob.shape
    valid = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)  # [R, T]
    count = lengths.clamp(min=1).float()
    probs = step_logprobs.exp()
    max_prob = probs.amax(-1)  # [R, T]
    entropy = -(probs * step_logprobs).nan_to_num().sum(-1)
    k = min(config.conf_top_k, step_logprobs.shape[-1])
    token_conf = -step_logprobs.topk(k, dim=-1).values.mean(-1)  # [R, T] DeepConf's C_i
    token_conf = token_conf.masked_fill(~valid, 0.0)

    def mean(x):
        return (x.masked_fill(~valid, 0.0)).sum(1) / count

    groups, inside = _sliding_means(token_conf, lengths, config.group_window)
    big = torch.finfo(groups.dtype).max
    group_min = groups.masked_fill(~inside, big).amin(1)
    # bottom 10% of the windows: sort ascending, average the first ceil(0.1 * windows)
    n_groups = inside.sum(1).clamp(min=1)
    ordered = groups.masked_fill(~inside, big).sort(1).values
    take = torch.ceil(0.1 * n_groups.float()).long().clamp(min=1)
    keep = torch.arange(t).unsqueeze(0) < take.unsqueeze(1)
    bottom = (ordered.masked_fill(~keep, 0.0)).sum(1) / take.float()
    last = (lengths - 1).clamp(min=0)
    tail = groups.gather(1, last.unsqueeze(1)).squeeze(1)  # the window ending at the last token
    answer = answer_mask & valid
    has_answer = answer.any(1)
    answer_logprob = token_logprob.masked_fill(~answer, 0.0).sum(1)
    answer_prob_min = token_logprob.exp().masked_fill(~answer, 1.0).amin(1)
    nan = torch.tensor(float("nan"))
    out = torch.stack([
        mean(max_prob), max_prob.masked_fill(~valid, 1.0).amin(1), mean(entropy), mean(token_logprob),
        mean(token_conf), group_min, bottom, tail,
        torch.where(has_answer, answer_logprob, nan), torch.where(has_answer, answer_prob_min, nan),
    ], dim=1)
    empty = lengths == 0
    return out.masked_fill(empty.unsqueeze(1), float("nan")) if empty.any() else out


def _answer_token_mask(tokenizer, tokens: torch.Tensor, lengths: torch.Tensor, answers: Sequence[str]) -> torch.Tensor:
    """``[R, T]`` the shortest run of final tokens whose text holds the row's answer (<= 32 tokens;
    none when the answer is "" or not found in that run)."""
    mask = torch.zeros(tokens.shape, dtype=torch.bool)
    for r, answer in enumerate(answers):
        n = int(lengths[r])
        if not answer or n == 0:
            continue
        row = tokens[r, :n].tolist()
        for k in range(1, min(n, _ANSWER_TOKENS_MAX) + 1):
            if answer in tokenizer.decode(row[n - k:], skip_special_tokens=True):
                mask[r, n - k:n] = True
                break
    return mask


def _trace_readings(lm, result: DecodeResult, answers: Sequence[str], config: ConfidenceConfig,
                    with_hidden: bool, rows_per_pass: int = 16) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[R, C]`` confidence summaries (and ``[R, H]`` mean hidden states) of a decode made with
    ``record_features=True``: the LM head on each recorded hidden state gives the logits the token was
    sampled from, in rows of ``rows_per_pass`` at a time (the ``[rows, T, V]`` log-probabilities)."""
    features = result.features
    if features is None:
        raise ValueError("the confidence summary needs the decode's hidden states (record_features=True)")
    lengths = result.lengths
    answer_mask = _answer_token_mask(lm.tokenizer, result.tokens, lengths, answers)
    summaries = []
    head = lm.lm_head
    for start in range(0, len(lengths), rows_per_pass):
        rows = slice(start, start + rows_per_pass)
        width = max(1, int(lengths[rows].max()))
        h = features[rows, :width].to(device=lm.device, dtype=lm.dtype)
        with torch.no_grad(), lm.linear_kernel():
            logprobs = torch.log_softmax(head(h).float(), dim=-1).cpu()  # [rows, T, V]
        tok = result.tokens[rows, :width].clamp(min=0)
        token_logprob = logprobs.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        summaries.append(confidence_summary(logprobs, token_logprob, lengths[rows], answer_mask[rows, :width], config))
    hidden = None
    if with_hidden:
        valid = result.valid_mask().float().unsqueeze(-1)
        hidden = (features.float() * valid).sum(1) / lengths.clamp(min=1).float().unsqueeze(-1)
    return torch.cat(summaries), hidden


# ---- building -----------------------------------------------------------------------------------------


def _header(task, lm, split: str, actions: Sequence[DecodingAction], samples: int, token_budget: int, seed: int,
            stop_at_answer: bool, config: ConfidenceConfig, hidden: bool) -> dict:
    return {"format": TABLE_FORMAT, "version": 1, "task": getattr(task, "name", ""), "split": split,
            "model": lm.fingerprint(), "actions": [a.to_dict() for a in actions], "samples": samples,
            "token_budget": token_budget, "seed": seed, "stop_at_answer": stop_at_answer,
            "confidence": {"conf_top_k": config.conf_top_k, "group_window": config.group_window,
                           "features": list(CONFIDENCE_FEATURES)}, "hidden": hidden}


def build_sample_table(lm, task, problems, actions: Sequence[DecodingAction], *, samples: int, token_budget: int,
                       path: str | Path, split: str, seed: int = 0, stop_at_answer: bool = True,
                       chunk_problems: int = 16, confidence: ConfidenceConfig = ConfidenceConfig(),
                       hidden: bool = False, progress: bool = True,
                       on_chunk: Callable[[int, int], None] | None = None) -> SampleTable:
    """Decode ``problems`` under every arm of ``actions`` (greedy once, a sampled arm ``samples`` times)
    into the table directory ``path``, chunk by chunk (resumable: problems already there are kept; a
    table made under other settings is refused). ``stop_at_answer``: each sample ends at its first
    complete answer (the protocol; off: decoded to EOS or the budget)."""
    if samples < 1 or not actions:
        raise ValueError("a sample table needs samples >= 1 and at least one action")
    actions = list(actions)
    if len({a.name for a in actions}) != len(actions):
        raise ValueError("the arms' actions must be distinct")
    path = Path(path)
    header = _header(task, lm, split, actions, samples, token_budget, seed, stop_at_answer, confidence, hidden)
    if (path / "header.json").is_file():
        stored = json.loads((path / "header.json").read_text())
        if stored != json.loads(json.dumps(header)):
            raise ValueError(f"{path} was decoded under other settings: {stored} vs {header}")
    else:
        write_json(path / "header.json", header)
    done_chunks = _chunk_indices(path)
    done = {pid for i in done_chunks for pid in json.loads((path / f"chunk-{i:05d}.json").read_text())["problems"]}
    todo = [p for p in problems if p.id not in done]
    next_index = (max(done_chunks) + 1) if done_chunks else 0
    action_set = ActionSet(actions)
    with tqdm(total=len(problems), initial=len(problems) - len(todo), desc="sample table", unit="problem",
              disable=not progress) as bar:
        for start in range(0, len(todo), chunk_problems):
            chunk = todo[start:start + chunk_problems]
            table = _decode_chunk(lm, task, chunk, action_set, samples, token_budget, seed, stop_at_answer,
                                  confidence, hidden)
            _write_chunk(path, next_index, table)
            next_index += 1
            bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(start + len(chunk), len(todo))
    table = SampleTable.load(path)
    order = {pid: i for i, pid in enumerate(table.problem_ids)}
    return table.subset([order[p.id] for p in problems if p.id in order])


def _decode_chunk(lm, task, problems, action_set: ActionSet, samples: int, token_budget: int, seed: int,
                  stop_at_answer: bool, config: ConfidenceConfig, with_hidden: bool) -> SampleTable:
    prompts, _ = encode_problems(lm, task, problems, seed=seed)
    # rows: (problem, arm, sample); greedy arms get one row, sampled arms ``samples``
    rows = [(i, a, j) for i in range(len(problems)) for a, act in enumerate(action_set.actions)
            for j in range(1 if act.is_greedy else samples)]
    result = decode(lm, prompts, action_set, prompt_of_row=[i for i, _, _ in rows],
                    row_actions=[a for _, a, _ in rows], token_budget=token_budget, record_features=True,
                    row_seeds=[row_seed(seed, problems[i].id, action_set.names[a], j, "draft-table")
                               for i, a, j in rows],
                    stop_checks=answer_stops(task, problems, [i for i, _, _ in rows], stop_at_answer))
    row_problems = [problems[i] for i, _, _ in rows]
    rewards = task.reward_batch(row_problems, result.texts)
    answers = [task.extract_answer(p, text) for p, text in zip(row_problems, result.texts)]
    summary, hidden = _trace_readings(lm, result, answers, config, with_hidden)
    p, a = len(problems), len(action_set)
    shape = (p, a, samples)
    out_answers = np.full(shape, -1, np.int32)
    out_rewards = np.zeros(shape, np.float32)
    out_tokens = np.zeros(shape, np.int32)
    out_conf = np.zeros(shape + (summary.shape[1],), np.float32)
    out_hidden = np.zeros(shape + (hidden.shape[1],), np.float16) if hidden is not None else None
    strings: list[list[str]] = []
    by_problem: dict[int, list[int]] = {}
    for r, (i, _, _) in enumerate(rows):
        by_problem.setdefault(i, []).append(r)
    for i in range(p):
        ids, names = answer_ids([answers[r] for r in by_problem[i]])
        strings.append(names)
        for r, answer_id in zip(by_problem[i], ids):
            _, arm, j = rows[r]
            # the greedy arm's one sample fills every slot (it is deterministic)
            slots = slice(None) if action_set.actions[arm].is_greedy else j
            out_answers[i, arm, slots] = answer_id
            out_rewards[i, arm, slots] = rewards[r]
            out_tokens[i, arm, slots] = int(result.lengths[r])
            out_conf[i, arm, slots] = summary[r].numpy()
            if out_hidden is not None:
                out_hidden[i, arm, slots] = hidden[r].numpy()
    return SampleTable({}, [pr.id for pr in problems], out_answers, strings, out_rewards, out_tokens, out_conf,
                       out_hidden)


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
