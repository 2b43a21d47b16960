"""Planted worlds, to check that the trainers find a known optimum (``benchmarks/planted.py`` runs
them for every seed and prints the figures).

A synthetic LM, task and rollout engine sit behind the trainers' own interfaces (``Rollouts``,
``RewardSource``, the LM's ``encode_chat`` / ``prompt_embeddings``), so what is tested is the real
``TokenTrainer`` / ``SequenceTrainer``: their policies, losses, advantages, optimisers,
validation and the adapter they keep. Nothing is decoded; every planted problem is a pure
function of its id.

Token level (the math-token actions: greedy, T = 0.5, T = 1.0, T = 1.25). A problem is
``STEPS`` decode steps. Each step is one of three kinds, drawn per problem (``KIND_PROBS``):

- *fork* (probability 0.06): the step survives with probability 0.5 / 0.7 / 0.95 / 0.85 under
  the four actions: sampling at T = 1 keeps the answer and greedy loses it half the time;
- *plain* (0.6): 1.0 / 0.99 / 0.96 / 0.9: greedy is best;
- *trivial* (0.34): base max-probability 0.99 (masked by the trainer); every action survives.

The reward is 1 with probability the product of the step survivals (binary, terminal, like a
verifier's). The step's hidden vector (``HIDDEN`` numbers, standard normal) marks a fork in one
coordinate (+2 at a fork, -2 elsewhere, plus noise 0.5); entropy and max-probability do not tell
fork from plain, so only the hidden state does. Expected rewards on the test split: greedy 0.50,
best static T = 0.5 0.57, T = 1 0.51, the oracle (T = 1 at forks, greedy elsewhere) 0.93: the
optimum beats every static action by 36 points.

``--weak`` blurs that marker to the strength of the real model's signal: the hidden vector is
standard normal plus +-0.477 along a direction spread over every coordinate, so the best possible
score of a step tells a fork from a plain step with AUC 0.75 (0.77 on the test split's steps). The
best policy of that observation (per step, the action of the highest expected survival under the
Bayes posterior P(fork | h)) reaches 0.65, not the oracle's 0.93; the trained adapter is reported
as a share of both margins.

Sequence level (four actions). A problem's prompt embedding carries its cluster c in 0..3 (+6 on
coordinate c of a standard normal vector). Action 0 (say greedy) succeeds with probability 0.55
everywhere; action a in 1..3 with 0.85 on cluster a - 1 and 0.25 elsewhere. Best static: action 0
(0.55); oracle (action c + 1 on clusters 0..2, action 0 on cluster 3): 0.775.

The metric per seed is ``recovered = (trained - best static) / (oracle - best static)``, the
share of the oracle's margin the trained adapter captures, computed *exactly* (expected reward
under the adapter's served mode, no sampling noise) on ``EVAL_PROBLEMS`` held-out problems (the
test split, which training and validation never see). ``--blind`` zeroes every observation the
policies see (hidden vectors, embeddings): a trainer that ignores the observation, whose
recovered share must stay near or below 0. ``--null`` (token level) makes a fork a plain step:
greedy is then optimal everywhere, nothing can be learned, and ``token_recovered`` is the trained
adapter's expected reward minus greedy's (a trainer that cannot end worse than it started keeps
it near 0; one that random-walks loses points).

"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace

import torch

from ..decoding.actions import ActionSet, DecodingAction
from ..decoding.loop import DecodeResult, StepFeatures, row_seed
from ..decoding.rollouts import Rollouts
from ..policies.networks import TokenPolicy
from ..tasks import Problem
from .draft import TABLE_FORMAT, DraftTable, DraftTrainConfig, DraftTrainer
from .sequence import SequenceTrainConfig, SequenceTrainer
from .token import TokenTrainConfig, TokenTrainer

HIDDEN = 16
STEPS = 24
EVAL_PROBLEMS = 256
SPLIT_SIZES = {"train": 512, "validation": 256, "test": EVAL_PROBLEMS}

TOKEN_ACTIONS = ActionSet(
    [DecodingAction(do_sample=False), DecodingAction(temperature=0.5), DecodingAction(temperature=1.0),
     DecodingAction(temperature=1.25)]
)
FORK, PLAIN, TRIVIAL = 0, 1, 2
KIND_PROBS = torch.tensor([0.06, 0.6, 0.34])
SURVIVAL = torch.tensor(
    [[0.5, 0.7, 0.95, 0.85],  # fork: T = 1 best, greedy loses half
     [1.0, 0.99, 0.96, 0.9],  # plain: greedy best
     [1.0, 1.0, 1.0, 1.0]]  # trivial: masked, nothing matters
)  # [kind, action]
NULL_SURVIVAL = SURVIVAL.clone()
NULL_SURVIVAL[FORK] = SURVIVAL[PLAIN]  # --null: a fork is a plain step, the hidden state tells nothing useful


def survival(null: bool) -> torch.Tensor:
    return NULL_SURVIVAL if null else SURVIVAL

SEQ_ACTIONS = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=0.7),
                         DecodingAction(temperature=1.0), DecodingAction(temperature=1.2)])
CLUSTERS = 4
SEQ_SUCCESS = torch.tensor(
    [[0.55, 0.85, 0.25, 0.25],
     [0.55, 0.25, 0.85, 0.25],
     [0.55, 0.25, 0.25, 0.85],
     [0.55, 0.25, 0.25, 0.25]]
)  # [cluster, action]


# ---- the planted problems -------------------------------------------------------------------------


@dataclass(frozen=True)
class PlantedProblem:
    """Everything about one planted problem, a pure function of its seed."""

    kinds: torch.Tensor  # [STEPS] long: FORK, PLAIN or TRIVIAL
    hidden: torch.Tensor  # [STEPS, HIDDEN]
    cluster: int
    embedding: torch.Tensor  # [HIDDEN]


_CACHE: dict[tuple[int, bool], PlantedProblem] = {}

# The weak world (--weak): the same problems, but a step's hidden vector tells a fork from the
# other steps only as well as the real model's hidden state tells greedy's failures (AUC about
# 0.75): standard normal noise in every coordinate plus +-WEAK_SHIFT along WEAK_DIRECTION, a unit
# vector spread over all HIDDEN coordinates with mean 0 (the policy's LayerNorm keeps it). The
# best possible score of a step, WEAK_DIRECTION . h, then has AUC Phi(WEAK_SHIFT * sqrt(2)) = 0.75.
WEAK_SHIFT = 0.477
WEAK_DIRECTION = torch.tensor([1.0, -1.0] * (HIDDEN // 2)) / HIDDEN**0.5


def planted(seed: int, weak: bool = False) -> PlantedProblem:
    if (seed, weak) not in _CACHE:
        g = torch.Generator().manual_seed(seed)
        kinds = torch.multinomial(KIND_PROBS, STEPS, replacement=True, generator=g)
        hidden = torch.randn(STEPS, HIDDEN, generator=g)
        marker = 0.5 * torch.randn(STEPS, generator=g)
        hidden[:, 0] = torch.where(kinds == FORK, 2.0, -2.0) + marker
        cluster = int(torch.randint(CLUSTERS, (1,), generator=g))
        embedding = torch.randn(HIDDEN, generator=g)
        embedding[cluster] += 6.0  # clear of the other 15 coordinates: the observation determines the cluster
        if weak:  # same kinds, cluster and embedding; only the steps' hidden vectors are blurred
            noise = torch.randn(STEPS, HIDDEN, generator=torch.Generator().manual_seed(seed + 1))
            hidden = noise + torch.where(kinds == FORK, WEAK_SHIFT, -WEAK_SHIFT).unsqueeze(1) * WEAK_DIRECTION
        _CACHE[seed, weak] = PlantedProblem(kinds, hidden, cluster, embedding)
    return _CACHE[seed, weak]


def fork_posterior(hidden: torch.Tensor) -> torch.Tensor:
    """``[...]`` P(fork | hidden, not trivial) in the weak world: the Bayes posterior from the planted
    prior and the two Gaussians +-WEAK_SHIFT * WEAK_DIRECTION (log-likelihood ratio 2 * shift * w.h)."""
    prior = KIND_PROBS[FORK] / (KIND_PROBS[FORK] + KIND_PROBS[PLAIN])
    return torch.sigmoid(torch.logit(prior) + 2 * WEAK_SHIFT * (hidden @ WEAK_DIRECTION))


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve of ``scores`` for boolean ``labels`` (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    wins = (pos[:, None] > neg[None, :]).float().sum() + 0.5 * (pos[:, None] == neg[None, :]).float().sum()
    return float(wins / (len(pos) * len(neg)))


def problem_seed(split: str, index: int) -> int:
    return row_seed(20261123, split, index) % (2**62)


class PlantedTask:
    """The verifiable task: reward 1 when the (synthetic) completion is "1"."""

    name = "planted"

    def load(self, split: str) -> list[Problem]:
        if split not in SPLIT_SIZES:
            raise ValueError(f"no split {split!r}")
        return [Problem(id=f"{split}{i}", question=str(problem_seed(split, i)), answer="1")
                for i in range(SPLIT_SIZES[split])]

    def prompt(self, problem, cot=False):
        return [{"role": "user", "content": problem.question}]

    def reward(self, problem, completion):
        return float(completion == "1")

    def reward_batch(self, problems, completions):
        return [self.reward(p, c) for p, c in zip(problems, completions)]

    def extract_answer(self, problem, completion):
        return completion.strip()


class PlantedLM:
    """The frozen LM's surface the trainers use: a prompt is the problem's seed as one token."""

    def __init__(self, blind: bool = False):
        self.hidden_size, self.blind = HIDDEN, blind
        self.device = torch.device("cpu")
        self.spec = SimpleNamespace(name_or_path="planted")

    def fingerprint(self) -> dict:
        return {"hidden_size": HIDDEN, "vocab_size": 0}

    def encode_chat(self, conversations):
        return [[int(c[-1]["content"])] for c in conversations]

    def prompt_embeddings(self, prompts, pooling="mean", batch_size=32) -> torch.Tensor:
        e = torch.stack([planted(p[0]).embedding for p in prompts])
        return torch.zeros_like(e) if self.blind else e


def _row_uniforms(seeds: list[int], count: int) -> torch.Tensor:
    """``[N, count]`` U[0, 1) draws, each row from its own seed (independent of the batch)."""
    return torch.stack([torch.rand(count, generator=torch.Generator().manual_seed(s % (2**62))) for s in seeds])


class PlantedRollouts(Rollouts):
    """Token-level rollouts of planted problems: the chooser picks an action per step from the
    step's features (hidden vector, entropy, max-probability), the reward is Bernoulli(product of
    step survivals)."""

    action_set = TOKEN_ACTIONS

    def __init__(self, blind: bool = False, null: bool = False, weak: bool = False):
        self.blind, self.null, self.weak = blind, null, weak

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        n = request.num_rows
        problems = [planted(request.prompts[p][0], self.weak) for p in request.prompt_of_row]
        kinds = torch.stack([p.kinds for p in problems])  # [n, STEPS]
        hidden = torch.stack([p.hidden for p in problems])  # [n, STEPS, HIDDEN]
        if self.blind:
            hidden = torch.zeros_like(hidden)
        max_prob = torch.where(kinds == TRIVIAL, 0.99, 0.5)
        entropy = torch.where(kinds == TRIVIAL, 0.05, 1.5)
        seeds = torch.tensor(request.row_seeds, dtype=torch.long)
        u = _row_uniforms(request.row_seeds, STEPS + 1)  # one per step for the action, one for the reward
        if request.row_actions is not None:
            actions = torch.tensor(request.row_actions).unsqueeze(1).expand(n, STEPS).clone()
        else:
            actions = torch.empty(n, STEPS, dtype=torch.long)
            for t in range(STEPS):
                actions[:, t] = chooser(StepFeatures(
                    hidden[:, t], entropy[:, t], max_prob[:, t], t, torch.full((n,), STEPS - t), torch.arange(n),
                    u[:, t], seeds,
                ))
        survive = survival(self.null)[kinds, actions].prod(1)
        win = u[:, STEPS] < survive
        return DecodeResult(
            prompt_of_row=torch.tensor(request.prompt_of_row), tokens=torch.zeros(n, STEPS, dtype=torch.long),
            lengths=torch.full((n,), STEPS), actions=actions, entropy=entropy, max_prob=max_prob,
            stopped_at_eos=torch.zeros(n, dtype=torch.bool), texts=["1" if w else "0" for w in win.tolist()],
            token_budgets=torch.full((n,), STEPS), features=hidden if record_features else None,
            prompts=request.prompts,
        )


class PlantedSequenceRewards:
    """The sequence trainer's ``RewardSource``: each of B completions succeeds independently with
    ``SEQ_SUCCESS[cluster, action]``; the metric scores them."""

    action_set = SEQ_ACTIONS
    offline = False

    def scorable(self, problem_ids):
        return None

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        out = []
        for p, a, b, m in zip(problems, actions, budgets, metrics):
            q = float(SEQ_SUCCESS[planted(int(p.question)).cluster, a])
            wins = _row_uniforms([row_seed(7, *key, p.id, j) for j in range(b)], 1)[:, 0] < q
            out.append(float(wins.any()) if m == "pass" else float(wins.float().mean()))
        return torch.tensor(out)


# ---- exact scores on held-out problems ------------------------------------------------------------


def token_values(policy: TokenPolicy | None, problems: list[Problem], blind: bool = False,
                 null: bool = False, weak: bool = False) -> dict[str, float]:
    """Expected reward on ``problems``: each static action, the oracle, (in the weak world) the best
    policy of the observation, and (with ``policy``) the policy sampled per token and its argmax."""
    infos = [planted(int(p.question), weak) for p in problems]
    kinds = torch.stack([i.kinds for i in infos])  # [P, STEPS]
    table = survival(null)[kinds]  # [P, STEPS, K]
    out = {f"static:{a}": float(table[..., a].prod(1).mean()) for a in range(len(TOKEN_ACTIONS))}
    out["oracle"] = float(table.max(-1).values.prod(1).mean())
    if weak:  # steps are independent given their own observation: the best policy of the observation
        # takes, per step, the action of the highest expected survival under P(fork | h)
        fork = fork_posterior(torch.stack([i.hidden for i in infos])).unsqueeze(-1)  # [P, STEPS, 1]
        expected = fork * survival(null)[FORK] + (1 - fork) * survival(null)[PLAIN]  # [P, STEPS, K]
        best = torch.where(kinds == TRIVIAL, 0, expected.argmax(-1))
        out["attainable"] = float(table.gather(-1, best.unsqueeze(-1)).squeeze(-1).prod(1).mean())
    if policy is not None:
        hidden = torch.stack([i.hidden for i in infos])
        if blind:
            hidden = torch.zeros_like(hidden)
        remaining = (STEPS - torch.arange(STEPS)).expand(len(infos), STEPS)
        entropy = torch.where(kinds == TRIVIAL, 0.05, 1.5)
        policy.eval()
        with torch.no_grad():
            probs = policy.probs(policy.observation(hidden, entropy, remaining))  # [P, STEPS, K]
        out["sample"] = float((probs * table).sum(-1).prod(1).mean())
        out["argmax"] = float(table.gather(-1, probs.argmax(-1, keepdim=True)).squeeze(-1).prod(1).mean())
    return out


def sequence_values(policy=None, problems: list[Problem] = (), blind: bool = False) -> dict[str, float]:
    """Expected pass@1 on ``problems``: each static action, the oracle, and the policy's argmax."""
    infos = [planted(int(p.question)) for p in problems]
    table = SEQ_SUCCESS[torch.tensor([i.cluster for i in infos])]  # [P, K]
    out = {f"static:{a}": float(table[:, a].mean()) for a in range(len(SEQ_ACTIONS))}
    out["oracle"] = float(table.max(-1).values.mean())
    if policy is not None:
        emb = torch.stack([i.embedding for i in infos])
        if blind:
            emb = torch.zeros_like(emb)
        actions, _ = policy.eval().choose(emb, torch.ones(len(infos), dtype=torch.long))
        out["argmax"] = float(table.gather(1, actions.unsqueeze(1)).mean())
    return out


def recovered(values: dict[str, float], trained: float, ceiling: str = "oracle") -> float:
    """The share of the ``ceiling``'s margin over the best static action captured (the oracle's, or
    in the weak world the best observation policy's); with no margin (the null world), the gain
    over the best static action itself."""
    best_static = max(v for k, v in values.items() if k.startswith("static:"))
    margin = values[ceiling] - best_static
    return (trained - best_static) / margin if margin > 1e-9 else trained - best_static


def best_static_action(values: dict[str, float]) -> int:
    return max((v, int(k.split(":")[1])) for k, v in values.items() if k.startswith("static:"))[1]


# ---- runs -------------------------------------------------------------------------------------------


TOKEN_DEFAULTS = dict(token_budget=STEPS, actions="math-token", val_problems=128)
"""What the planted environment fixes; everything else is the trainer's default."""
SEQUENCE_DEFAULTS = dict(token_budget=STEPS, actions="planted", parallel_budgets=(1,), metric="pass", val_problems=128)


def run_token(seed: int, out_dir: Path, blind: bool = False, prior: bool = True, null: bool = False,
              weak: bool = False, **overrides) -> dict:
    """Train a token adapter on the planted task (``prior``: starting at the best static action,
    chosen on the validation split as a caller would) and score it on the test split."""
    task = PlantedTask()
    if prior:
        values = token_values(None, task.load("validation"), null=null, weak=weak)
        overrides = {"prior_action": best_static_action(values), **overrides}
    config = TokenTrainConfig(**{**TOKEN_DEFAULTS, "seed": seed, **overrides})
    trainer = TokenTrainer(config, PlantedLM(blind), task, PlantedRollouts(blind, null, weak), out_dir,
                           progress=False)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    values = token_values(trainer.policy, task.load("test"), blind, null, weak)
    mode = getattr(trainer, "policy_mode", "sample")
    out = {"seed": seed, "recovered": recovered(values, values[mode]), "mode": mode, "values": values,
           "recovered_sample": recovered(values, values["sample"]),
           "recovered_argmax": recovered(values, values["argmax"]), "seconds": seconds}
    if weak:
        out["recovered_of_attainable"] = recovered(values, values[mode], "attainable")
    return out


def weak_signal_auc(problems: list[Problem]) -> float:
    """AUC of the weak world's best step score (WEAK_DIRECTION . h) for fork against plain steps."""
    infos = [planted(int(p.question), weak=True) for p in problems]
    kinds = torch.cat([i.kinds for i in infos])
    scores = torch.cat([i.hidden @ WEAK_DIRECTION for i in infos])
    keep = kinds != TRIVIAL
    return auc(scores[keep], kinds[keep] == FORK)


def run_sequence(seed: int, out_dir: Path, blind: bool = False, prior: bool = True, **overrides) -> dict:
    """Train a sequence adapter on the planted task (``prior``: starting at the best static action,
    chosen on the validation split) and score it on the test split."""
    task = PlantedTask()
    if prior and "prior_action" in {f.name for f in fields(SequenceTrainConfig)}:
        overrides = {"prior_action": best_static_action(sequence_values(None, task.load("validation"))), **overrides}
    config = SequenceTrainConfig(**{**SEQUENCE_DEFAULTS, "seed": seed, **overrides})
    trainer = SequenceTrainer(config, PlantedLM(blind), task, PlantedSequenceRewards(), out_dir, progress=False)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    values = sequence_values(trainer.policy, task.load("test"), blind)
    return {"seed": seed, "recovered": recovered(values, values["argmax"]), "values": values, "seconds": seconds}



# ---- the draft world: greedy's confidence carries the signal, the prompt does not -------------------
#
# Each problem is "sure" or "unsure" (probability DRAFT_UNSURE). The greedy draft is right with
# probability 0.8 on a sure problem and 0.2 on an unsure one; a re-decode (one action) with 0.5 on
# both. Best static: keep the draft (0.8 * 0.6 + 0.2 * 0.4 = 0.56; re-decoding everywhere, 0.5);
# oracle: keep where sure, re-decode where unsure (0.68). The draft's confidence summary marks the
# kind (mean max-probability 0.8 vs 0.6 and mean entropy 0.6 vs 1.2, noise 0.08 and 0.15: a few
# standard deviations apart, so a rule on it can reach the oracle); its hidden vectors and the prompt
# embedding are noise. The draft-gated trainer (``training.draft.DraftTrainer``) trains on the
# world's both-arms tables (written as ``DraftTable`` files); ``recovered`` is computed exactly on
# the test split. Fed the prompt embedding instead (features='prompt'), it must stay near 0.

DRAFT_UNSURE = 0.4
DRAFT_SAMPLES = 8
DRAFT_RIGHT = {False: 0.8, True: 0.2}  # unsure -> P(draft right)
REDECODE_RIGHT = {False: 0.5, True: 0.5}


def draft_world_record(split: str, index: int) -> dict:
    """One problem of the draft world as a ``DraftTable`` record (a pure function of its id)."""
    g = torch.Generator().manual_seed(problem_seed(f"draft-{split}", index))
    unsure = bool(torch.rand((), generator=g) < DRAFT_UNSURE)
    max_prob = (0.6 if unsure else 0.8) + 0.08 * float(torch.randn((), generator=g))
    entropy = (1.2 if unsure else 0.6) + 0.15 * float(torch.randn((), generator=g))
    draft_right = float(torch.rand((), generator=g) < DRAFT_RIGHT[unsure])
    samples = (torch.rand(DRAFT_SAMPLES, generator=g) < REDECODE_RIGHT[unsure]).float().tolist()
    action = DecodingAction(temperature=0.7).name
    return {"problem": f"{split}{index}", "unsure": unsure,
            "draft": {"reward": draft_right, "answer": str(int(draft_right)), "length": 10,
                      "confidence": [entropy, entropy + 1.0, max_prob, max_prob - 0.2, 0.4, 1.0],
                      "mean_hidden": torch.randn(HIDDEN, generator=g).tolist(),
                      "last_hidden": torch.randn(HIDDEN, generator=g).tolist()},
            "prompt_embedding": torch.randn(HIDDEN, generator=g).tolist(),
            "samples": {action: [{"reward": r, "answer": str(int(r)), "length": 10, "confidence": 0.7}
                                 for r in samples]}}


def write_draft_table(split: str, path: Path) -> Path:
    header = {"format": TABLE_FORMAT, "version": 1, "task": "planted", "split": split,
              "model": {"hidden_size": HIDDEN, "vocab_size": 0}, "samples": DRAFT_SAMPLES, "token_budget": STEPS,
              "seed": 0, "actions": [DecodingAction(temperature=0.7).to_dict()]}
    lines = [json.dumps({"header": header})] + [json.dumps(draft_world_record(split, i))
                                                for i in range(SPLIT_SIZES[split])]
    path.write_text("\n".join(lines) + "\n")
    return path


def draft_values(policy, context, split: str = "test") -> dict[str, float]:
    """Exact expected pass@1 on ``split``: both static arms, the oracle and (``policy``) the adapter's
    argmax choice."""
    records = [draft_world_record(split, i) for i in range(SPLIT_SIZES[split])]
    keep = torch.tensor([DRAFT_RIGHT[r["unsure"]] for r in records])
    redo = torch.tensor([REDECODE_RIGHT[r["unsure"]] for r in records])
    values = {"static:0": float(keep.mean()), "static:1": float(redo.mean()),
              "oracle": float(torch.maximum(keep, redo).mean())}
    if policy is not None:
        table = DraftTable({}, {r["problem"]: r for r in records})
        x = table.context([r["problem"] for r in records], context)
        choice, _ = policy.choose(x, torch.ones(len(records), dtype=torch.long))
        values["argmax"] = float(torch.where(choice == 0, keep, redo).mean())
        values["redecode_share"] = float((choice > 0).float().mean())
    return values


def run_draft(seed: int, out_dir: Path, features: str = "confidence", **overrides) -> dict:
    """Train the draft-gated adapter on the draft world's tables and score it on the test split."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = {s: write_draft_table(s, out_dir / f"table_{s}.jsonl") for s in ("train", "validation")}
    config = DraftTrainConfig(**{"table": str(tables["train"]), "val_table": str(tables["validation"]),
                                 "features": features, "token_budget": STEPS, "parallel_budgets": (1,),
                                 "prior_action": 0, "val_problems": 256, "max_train_prompts": None,
                                 "steps": 60, "val_every": 10, "seed": seed,
                                 # the world's drafts are whole answers, not decoded with a stop
                                 "stop_at_answer": False, **overrides})
    trainer = DraftTrainer(config, PlantedLM(), PlantedTask(), out_dir / "adapter", progress=False)
    started = time.perf_counter()
    trainer.train()
    values = draft_values(trainer.policy, trainer.context_config)
    return {"seed": seed, "features": features, "recovered": recovered(values, values["argmax"]), "values": values,
            "seconds": time.perf_counter() - started}
