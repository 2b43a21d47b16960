"""Training the draft-gated adapter (``policies.draft``) with the sequence trainer.

The draft-gated adapter is a ``SequencePolicy`` whose context is the greedy draft's summary and
whose outputs are "keep the draft" and one re-decode per action. ``DraftTrainer`` is the
``SequenceTrainer`` (REINFORCE with the prior, PPO clip, step-0 validation, keep-best) with that
context and a reward source over a **both-arms table**: for every problem, its greedy draft (outcome,
answer, summary) and ``samples`` re-decodes under every re-decode action, decoded once
(``build_draft_table``, resumable) and replayed. Every arm is observed for every problem, so the
trainer can use the full-information signal (``full_information``): the exact gradient of the
expected reward ``sum_a pi(a|x) (R(x, a) - b)`` over all arms, with ``R`` the table's unbiased
estimate, instead of one sampled arm's reward.

Departures from the sequence trainer:
- **Rewards.** Keep: the draft's reward (one decode). Re-decode with action a at budget B: at B = 1
  one stored sample of a (two decodes); at B > 1 pass@B over the draft and B - 1 stored samples of a
  (B decodes). ``redecode_cost`` is subtracted from a re-decode's reward: a price per problem on the
  extra compute (0: none).
- **Validation** scores each validation problem by the expected reward of the argmax arm (unbiased
  pass@k over the stored samples), not by one draw: lower variance on the same rows.
- **Context.** ``features`` picks what the policy reads (``policies.draft.DRAFT_FEATURE_SETS``);
  'prompt' feeds it the prompt embedding instead of the draft, the control that sees what a
  sequence adapter sees. The context is standardised with statistics of the training problems
  (``SequencePolicyConfig.input_norm='standardise'``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm

from ..core.stats import pass_at_k
from ..decoding.actions import GREEDY, ActionSet, DecodingAction, load_action_set
from ..decoding.grid import (
    SAMPLE_SEED_TAG,
    Grid,
    JsonlTable,
    decode_rows,
    fill_chunks,
    group_chunks,
    refuse_other_settings,
)
from ..decoding.loop import decode
from ..decoding.rollouts import answer_stops, encode_problems
from ..policies.draft import (
    KEEP_DRAFT,
    DraftContextConfig,
    DraftSummary,
    draft_context,
    redecode_rows,
    summarise_draft,
)
from ..policies.networks import AdapterConfig, SequencePolicy, SequencePolicyConfig, prior_distribution, save_adapter
from ..selection.outcomes import OutcomeTable, check_replay_header
from ..tasks import problems_record, task_record
from .common import Validation, step_generator
from .sequence import SequenceTrainConfig, SequenceTrainer, selection_record

log = logging.getLogger(__name__)

__all__ = [
    "DraftTable",
    "build_draft_table",
    "DraftTrainConfig",
    "DraftRewards",
    "DraftTrainer",
    "arm_values",
    "ensure_tables",
    "table_stop",
]

TABLE_FORMAT = "decoding-adapters/draft-table"


# ---- the both-arms table -------------------------------------------------------------------------


class DraftTable:
    """Per problem: the greedy draft (reward, answer, length, summary, prompt embedding) and
    ``samples`` re-decodes under each action (reward, answer, length, mean max-probability).
    Stored as JSON lines (``decoding.grid.JsonlTable``: a header, then one record per problem),
    appended as chunks finish; the re-decodes are the grid's rows and seeds (``decoding.grid``)."""

    def __init__(self, header: dict, records: dict[str, dict] | None = None):
        self.header, self.records = header, dict(records or {})

    @property
    def actions(self) -> list[DecodingAction]:
        return [DecodingAction.from_dict(a) for a in self.header["actions"]]

    @property
    def problem_ids(self) -> list[str]:
        return list(self.records)

    @classmethod
    def load(cls, path: str | Path) -> "DraftTable":
        """Read a table file (``decoding.grid.JsonlTable``: a line cut by a kill is dropped, and its
        problem decoded again on resume)."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"no draft table at {path}")
        header, rows = JsonlTable(path).read()
        if header is None or header.get("format") != TABLE_FORMAT:
            raise ValueError(f"{path} is not a draft table")
        records = {}
        for record in rows:
            if "problem" in record:
                records[record["problem"]] = record
        return cls(header, records)

    def summary(self, ids: Sequence[str]) -> DraftSummary:
        rows = [self.records[i]["draft"] for i in ids]
        return DraftSummary(torch.tensor([r["confidence"] for r in rows]),
                            torch.tensor([r["mean_hidden"] for r in rows]),
                            torch.tensor([r["last_hidden"] for r in rows]))

    def prompt_embeddings(self, ids: Sequence[str]) -> torch.Tensor:
        return torch.tensor([self.records[i]["prompt_embedding"] for i in ids])

    def context(self, ids: Sequence[str], config: DraftContextConfig) -> torch.Tensor:
        if config.features == "prompt":
            return draft_context(None, config, self.prompt_embeddings(ids))
        return draft_context(self.summary(ids), config)

    def draft_reward(self, problem_id: str) -> float:
        return float(self.records[problem_id]["draft"]["reward"])

    def sample_rewards(self, problem_id: str, action: str) -> list[float]:
        return [s["reward"] for s in self.records[problem_id]["samples"][action]]


def _table_header(task, lm, split: str, actions, samples: int, token_budget: int, seed: int,
                  stop_at_answer: bool) -> dict:
    header = {"format": TABLE_FORMAT, "version": 1, "task": getattr(task, "name", ""), "split": split,
              "model": lm.fingerprint(), "actions": [a.to_dict() for a in actions], "samples": samples,
              "token_budget": token_budget, "seed": seed}
    if stop_at_answer:  # present only when on, so a table decoded without the stop keeps its header
        header["stop_at_answer"] = True
    return header


def table_stop(header: dict) -> bool:
    """Whether a table's drafts and re-decodes were stopped at their first complete answer (a table
    written when the two had a flag each: both on)."""
    if "stop_at_answer" in header:
        return bool(header["stop_at_answer"])
    legacy = {bool(header.get(k, False)) for k in ("draft_stop_at_answer", "redecode_stop_at_answer")}
    return legacy == {True}


def _round(values: torch.Tensor, digits: int = 4) -> list[float]:
    return [round(float(v), digits) for v in values]


def build_draft_table(lm, task, problems, actions: Sequence[DecodingAction], *, samples: int, token_budget: int,
                      path: str | Path, split: str, seed: int = 0, chunk_problems: int = 16,
                      stored: OutcomeTable | None = None, on_chunk=None, stop_at_answer: bool) -> DraftTable:
    """Decode the both-arms table of ``problems`` into ``path`` (resumable: problems already there
    are kept, and a table made under other settings is refused). ``stored``: a ``select-actions``
    outcome table decoded under the same settings whose samples of ``actions`` are taken instead of
    decoding them (rewards and lengths only: no answers, so no majority vote over them); only the
    drafts are decoded then. ``stop_at_answer``: the drafts and the re-decodes end at their first complete
    answer (``Task.answer_complete``), as the adapter will decode them."""
    path = Path(path)
    header = _table_header(task, lm, split, actions, samples, token_budget, seed, stop_at_answer)
    if stored is not None:
        check_replay_header(stored, task=task, lm=lm, token_budget=token_budget, seed=seed, cot_ratio=0.0,
                            stop_at_answer=stop_at_answer)
        header["samples_from"] = stored.header.get("data")
    if path.is_file():
        table = DraftTable.load(path)
        refuse_other_settings(path, table.header, header)
    else:
        table = DraftTable(header)
    todo = [p for p in problems if p.id not in table.records]
    grid = Grid(tuple(actions), samples, seed, SAMPLE_SEED_TAG, greedy_once=False)
    file = JsonlTable(path)
    file.open(header)

    def store(records: list[dict]) -> None:
        file.append(records)
        table.records.update((record["problem"], record) for record in records)

    try:
        fill_chunks(group_chunks(todo, chunk_problems),
                    lambda chunk: _table_chunk(lm, task, chunk, grid, token_budget, stored, stop_at_answer), store,
                    on_chunk, size=len)
    finally:
        file.close()
    return table


def _stored_samples(stored: OutcomeTable, problem_id: str, actions: ActionSet, samples: int) -> dict:
    out = {}
    for name in actions.names:
        outcomes = stored.outcomes(problem_id, name)[:samples]
        if len(outcomes) < samples:
            raise ValueError(f"the stored table has {len(outcomes)} samples of {name} for {problem_id}, not {samples}")
        out[name] = [{"reward": o.reward, "answer": None, "length": o.length, "confidence": None} for o in outcomes]
    return out


def _table_chunk(lm, task, problems, grid: Grid, token_budget: int, stored: OutcomeTable | None,
                 stop_at_answer: bool) -> list[dict]:
    prompts, _ = encode_problems(lm, task, problems, seed=grid.seed)
    draft = decode(lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=token_budget, record_features=True,
                   stop_checks=answer_stops(task, problems, range(len(problems)), stop_at_answer))
    summary = summarise_draft(draft)
    embeddings = lm.prompt_embeddings(prompts, pooling="mean")
    draft_rewards = task.reward_batch(problems, draft.texts)
    action_set = ActionSet(list(grid.actions))
    if stored is not None:
        return [_record(task, problem, i, draft, summary, embeddings, draft_rewards,
                        _stored_samples(stored, problem.id, action_set, grid.samples))
                for i, problem in enumerate(problems)]
    rows = grid.rows(len(problems))  # every action decoded once per sample slot
    result, rewards = decode_rows(lm, task, problems, prompts, grid, rows, token_budget=token_budget,
                                  stop_at_answer=stop_at_answer)
    valid = result.valid_mask().float()
    conf = (result.max_prob * valid).sum(1) / result.lengths.clamp(min=1)
    out = []
    for i, problem in enumerate(problems):
        decoded: dict[str, list[dict]] = {}
        for r, row in enumerate(rows):
            if row.problem == i:
                decoded.setdefault(action_set.names[row.action], []).append({
                    "reward": float(rewards[r]), "answer": task.extract_answer(problem, result.texts[r]),
                    "length": int(result.lengths[r]), "confidence": round(float(conf[r]), 4)})
        out.append(_record(task, problem, i, draft, summary, embeddings, draft_rewards, decoded))
    return out


def _record(task, problem, i: int, draft, summary: DraftSummary, embeddings, draft_rewards, samples: dict) -> dict:
    return {"problem": problem.id, "draft": {
        "reward": float(draft_rewards[i]), "answer": task.extract_answer(problem, draft.texts[i]),
        "length": int(draft.lengths[i]), "confidence": _round(summary.confidence[i]),
        "mean_hidden": _round(summary.mean_hidden[i]), "last_hidden": _round(summary.last_hidden[i]),
    }, "prompt_embedding": _round(embeddings[i]), "samples": samples}


def arm_values(table: DraftTable, ids: Sequence[str], actions: Sequence[str], budget: int,
               redecode_cost: float = 0.0) -> torch.Tensor:
    """``[P, 1 + K]`` expected reward of every arm per problem at parallel budget ``budget``: keep
    (the draft's reward) and each re-decode (unbiased over the stored samples), less
    ``redecode_cost`` for a re-decode."""
    out = torch.empty(len(ids), 1 + len(actions), dtype=torch.float64)
    for p, pid in enumerate(ids):
        draft = table.draft_reward(pid)
        out[p, KEEP_DRAFT] = draft
        for a, name in enumerate(actions):
            rewards = table.sample_rewards(pid, name)
            n, c = len(rewards), int(sum(r >= 0.5 for r in rewards))
            if budget == 1:
                value = c / n
            else:  # the draft and B - 1 samples: right unless all are wrong
                value = 1 - (1 - draft) * (1 - pass_at_k(n, c, min(redecode_rows(budget), n)))
            out[p, 1 + a] = value - redecode_cost
    return out


# ---- training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftTrainConfig(SequenceTrainConfig):
    """The sequence trainer's settings plus the draft-gated adapter's own. ``prior_action`` is an
    index into the policy's outputs (0: keep the draft)."""

    table: str = ""
    """The training problems' both-arms table, built where missing (``train-draft``: OUT/tables/)."""
    val_table: str = ""
    """The validation problems' both-arms table, built where missing (``train-draft``: OUT/tables/)."""
    features: str = "confidence"
    """What the policy reads (``policies.draft.DRAFT_FEATURE_SETS``)."""
    redecode_actions: tuple[str, ...] = ()
    """Names of the table's actions the policy may re-decode with (empty: all of them)."""
    redecode_cost: float = 0.0
    """Subtracted from a re-decode's reward: the price of the extra decodes."""
    full_information: bool = True
    """Use every arm's table value per problem (the exact expected-reward gradient) instead of one
    sampled arm's replayed reward (the bandit signal)."""
    table_samples: int = 8
    """Re-decodes per action and problem when a table is built here (``ensure_tables``)."""

    def __post_init__(self) -> None:
        if self.full_information and self.group_size != 1:
            raise ValueError("group_size has no effect with full_information (every arm's table value is used "
                             "already): leave it at 1, or pass --no-full-information to draw G arms per problem")
        if self.replay:
            raise ValueError("the draft trainer replays its own both-arms table (table=...), not an outcome table")
        if self.metric != "pass":
            raise ValueError("the draft trainer scores pass@B (the table stores rewards)")
        if self.redecode_cost < 0 or self.table_samples < 1:
            raise ValueError("redecode_cost must be >= 0 and table_samples >= 1")
        if not self.table:
            raise ValueError("the draft trainer needs a both-arms table (table=...)")
        DraftContextConfig(features=self.features, token_budget=self.token_budget)  # validates
        super().__post_init__()


def ensure_tables(config: DraftTrainConfig, lm, task, on_chunk=None, progress: bool = False) -> None:
    """Build ``config.table`` (the first ``max_train_prompts`` training problems) and
    ``config.val_table`` (the first ``val_problems`` validation problems) where they are missing or
    unfinished: the greedy draft and ``table_samples`` re-decodes under every sampled action of
    ``config.actions`` (greedy is the draft; only ``redecode_actions`` when those are named).
    ``progress``: one bar over the problems of both tables; ``on_chunk(done, total)`` after each chunk."""
    wanted = set(config.redecode_actions)
    actions = [a for a in load_action_set(config.actions) if not a.is_greedy and (not wanted or a.name in wanted)]
    if not actions:
        raise ValueError(f"the action set {config.actions!r} has no sampled action to re-decode with")
    todo = []
    for path, split, count in ((config.table, "train", config.max_train_prompts),
                               (config.val_table, "validation", config.val_problems)):
        if path:
            problems = task.load(split)[:count]
            done = set(DraftTable.load(path).problem_ids) if Path(path).is_file() else set()
            todo.append((path, split, problems, sum(p.id not in done for p in problems)))
    total = sum(left for *_, left in todo)
    # one bar over every problem still to decode; chunks small enough that it moves (at least ~8
    # times), large enough to batch the re-decodes of several problems together
    chunk = max(2, min(16, math.ceil(total / 8))) if total else 16
    bar = tqdm(total=total, desc="draft tables", unit="problem", disable=not progress or not total)
    for path, split, problems, _ in todo:
        before = bar.n

        def advance(done: int, _total: int, before=before) -> None:
            bar.update(before + done - bar.n)
            if on_chunk is not None:
                on_chunk(bar.n, total)

        build_draft_table(lm, task, problems, actions, samples=config.table_samples,
                          token_budget=config.token_budget, path=path, split=split, seed=config.seed,
                          chunk_problems=chunk, on_chunk=advance, stop_at_answer=config.stop_at_answer)
    bar.close()


class DraftRewards:
    """The reward source over a both-arms table: one draw per (problem, arm, budget)."""

    offline = True

    def __init__(self, tables: Sequence[DraftTable], actions: Sequence[str], seed: int, redecode_cost: float):
        self.records = {pid: (t, pid) for t in tables for pid in t.problem_ids}
        self.actions, self.seed, self.redecode_cost = list(actions), seed, redecode_cost
        by_name = {a.name: a for a in tables[0].actions}
        self.action_set = ActionSet([by_name[n] for n in self.actions])

    def scorable(self, problem_ids):
        return [i for i in problem_ids if i in self.records]

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        gen = step_generator(self.seed, "draft-replay", *key)
        out = []
        for problem, a, b in zip(problems, actions, budgets):
            table, pid = self.records[problem.id]
            draft = table.draft_reward(pid)
            if a == KEEP_DRAFT:
                out.append(draft)
                continue
            stored = table.sample_rewards(pid, self.actions[a - 1])
            draws = torch.randint(len(stored), (redecode_rows(b),), generator=gen).tolist()
            answers = [stored[d] for d in draws] + ([draft] if b > 1 else [])
            out.append(max(answers) - self.redecode_cost)
        return torch.tensor(out)

    def values(self, problem_ids: Sequence[str], budget: int) -> torch.Tensor:
        """``[P, 1 + K]`` expected reward of each arm (``arm_values``)."""
        out = []
        for pid in problem_ids:
            table, _ = self.records[pid]
            out.append(arm_values(table, [pid], self.actions, budget, self.redecode_cost))
        return torch.cat(out)


class DraftTrainer(SequenceTrainer):
    """The sequence trainer over the draft's context and a both-arms table (module docstring)."""

    name = "train-draft"

    def __init__(self, config: DraftTrainConfig, lm, task, out_dir: str | Path, *, task_name: str = "",
                 progress: bool = True):
        self.train_table = DraftTable.load(config.table)
        self.val_table = DraftTable.load(config.val_table) if config.val_table else None
        names = [a.name for a in self.train_table.actions]
        chosen = list(config.redecode_actions) or names
        missing = [n for n in chosen if n not in names]
        if missing:
            raise ValueError(f"re-decode actions {missing} are not in the table (it has {names})")
        tables = [self.train_table] + ([self.val_table] if self.val_table else [])
        for table in tables:
            if table_stop(table.header) != config.stop_at_answer:
                raise ValueError(
                    f"a table was decoded with stop_at_answer={table_stop(table.header)}, the config says "
                    f"{config.stop_at_answer}: set stop_at_answer as the tables were decoded, or decode them again")
        self.context_config = DraftContextConfig(features=config.features, token_budget=config.token_budget)
        rewards = DraftRewards(tables, chosen, config.seed, config.redecode_cost)
        super().__init__(config, lm, task, rewards, out_dir, task_name=task_name, progress=progress)

    def _build_policy(self) -> SequencePolicy:
        cfg = self.config
        outputs = 1 + len(self.rewards.actions)
        policy = SequencePolicy(SequencePolicyConfig(
            embed_dim=self.context_config.dim(self.lm.hidden_size), num_actions=outputs, use_budget=cfg.use_budget,
            hidden=cfg.policy_hidden, temperature=cfg.policy_temperature,
            max_budget=max(max(cfg.parallel_budgets), 2),
            prior=prior_distribution(outputs, cfg.prior_action, cfg.prior_mass),
            budget_priors=self._budget_priors(outputs), input_norm="standardise",
        ))
        ids = [p for p in self.train_table.problem_ids][: cfg.max_train_prompts]
        policy.set_standardisation(self.train_table.context(ids, self.context_config))
        return policy

    def _prepare(self) -> None:
        cfg = self.config
        by_id = {p.id: p for split in ("train", "validation") for p in self.task.load(split)}
        self.train_problems = [by_id[i] for i in self.train_table.problem_ids if i in by_id][: cfg.max_train_prompts]
        source = self.val_table.problem_ids if self.val_table else []
        self.val_problems = [by_id[i] for i in source if i in by_id][: cfg.val_problems]
        if not self.train_problems:
            raise ValueError("the draft table holds none of this task's training problems")
        if {p.id for p in self.train_problems} & {p.id for p in self.val_problems}:
            raise ValueError("the training and validation tables share problems")

    def preflight_rows(self) -> tuple[list, list, str] | None:
        """The training table's drafts and re-decodes (a row that reached the token budget counts as
        cut): nothing is decoded, the table is what the policy learns from."""
        header = self.train_table.header
        budget = int(header["token_budget"] if "token_budget" in header else self.config.token_budget)
        rewards, cut = [], []
        for pid in [p.id for p in self.train_problems]:
            record = self.train_table.records[pid]
            for row in [record["draft"], *(s for samples in record["samples"].values() for s in samples)]:
                rewards.append(float(row["reward"]))
                cut.append(int(row["length"]) >= budget)
        return rewards, cut, f"the training table's drafts and re-decodes ({len(self.train_problems)} problems)"

    def _encode(self, problems):
        """(no prompts: nothing is decoded, contexts ``[P, D]`` from the tables, no CoT)."""
        contexts = torch.cat([self.rewards.records[p.id][0].context([p.id], self.context_config) for p in problems])
        return None, contexts, [False] * len(problems)

    def train_step(self) -> dict:
        if not self.config.full_information:
            return super().train_step()
        return self._full_information_step()

    def _full_information_step(self) -> dict:
        """Every arm's table value for each problem of the step: loss ``-sum_a pi(a|x) A(x, a)`` with
        ``A = R - sum_a pi(a|x) R`` (the policy's own expected reward as baseline), minus the entropy
        bonus; PPO epochs repeat it (no ratio is needed: nothing was sampled)."""
        cfg = self.config
        gen = step_generator(cfg.seed, "step", self.step)
        picks = torch.randint(len(self.train_problems), (cfg.prompts_per_step,), generator=gen).tolist()
        problems = [self.train_problems[i] for i in picks]
        _, contexts, _ = self._encode(problems)
        budgets = [cfg.parallel_budgets[i] for i in
                   torch.randint(len(cfg.parallel_budgets), (len(problems),), generator=gen).tolist()]
        values = torch.stack([self.rewards.values([p.id], b)[0] for p, b in zip(problems, budgets)]).float()
        budget_t = torch.tensor(budgets)
        self.policy.train()
        for epoch in range(cfg.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            logp = self.policy.log_probs(contexts, budget_t)
            probs = logp.exp()
            advantage = values - (probs.detach() * values).sum(-1, keepdim=True)
            entropy = -(probs * logp).sum(-1)
            loss = -(probs * advantage).sum(-1).mean() - cfg.entropy_coef * entropy.mean()
            if epoch == 0:
                first_probs, first_entropy = probs.detach(), entropy.detach()
            loss.backward()
            self.optimizer.step()
        expected = (first_probs * values).sum(-1)
        return {"reward": float(expected.mean()), "entropy": float(first_entropy.mean()), "loss": float(loss.detach()),
                "action_probs": first_probs.mean(0).tolist(), "offline_replay": True, "full_information": True}

    def validate(self) -> Validation:
        """Expected reward of the argmax arm on every validation problem at every budget."""
        if not self.val_problems:
            return Validation(None)
        ids = [p.id for p in self.val_problems]
        _, contexts, _ = self._encode(self.val_problems)
        self.policy.eval()
        scores, groups = [], []
        for b in self.config.parallel_budgets:
            choice, _ = self.policy.choose(contexts, torch.full((len(ids),), b))
            values = self.rewards.values(ids, b)
            scores.append(values.gather(1, choice.unsqueeze(1)).squeeze(1))
            groups += [b] * len(ids)
        grouped = torch.tensor(groups) if self.config.use_budget else None
        problems = torch.arange(len(ids)).repeat(len(self.config.parallel_budgets))  # budget-major, as the scores
        return Validation(torch.cat(scores).double(), groups=grouped, problems=problems)

    def save(self) -> Path:
        config = AdapterConfig(
            kind="draft", policy=asdict(self.policy.config), actions=self.rewards.action_set.to_json(),
            base_model=self.lm.spec.name_or_path, base_fingerprint=self.lm.fingerprint(),
            embedding={"pooling": self.config.pooling}, parallel_budgets=list(self.config.parallel_budgets),
            token_budget=self.config.token_budget, task=self.task_name, task_options=task_record(self.task),
            training=asdict(self.config),
            lm_dtype=self.lm.fingerprint().get("dtype"),
            trained_on=problems_record(self.train_problems) if self.train_problems else None,
            selected_on=selection_record(self.config.actions), draft=asdict(self.context_config),
            stop_at_answer=self.config.stop_at_answer,
        )
        return save_adapter(self.out_dir, self.policy, config)

