"""The study's config: the sizes of every stage, the protocol they share, and the nested trainer and
evaluation configs.

``StudyConfig`` nests the trainers' and the evaluation's own configs, so each setting is declared
once: ``--token.lr`` on the command line is ``TokenTrainConfig.lr``. The fields a study sets per
run (the token budget and stop, seeds, which variant) are not options of the nested configs
(``metadata["exclude"]``); the study's protocol (``decoding.protocol.DecodingProtocol``: token
budget, stop at the first answer) is put on them whole, and its seed count on the evaluation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ..decoding.actions import DEFAULT_TOKEN_BUDGET, DecodingAction
from ..decoding.protocol import STOP_AT_ANSWER, DecodingProtocol
from ..evaluation import (
    EvalConfig,
)
from ..evaluation.decoder_choice import table_arms
from ..policies.fixed_rules import RULES, VERIFIER_RULES
from ..training.sequence import SequenceTrainConfig
from ..training.token import TokenTrainConfig

__all__ = [
    "BudgetConfig",
    "SelectionConfig",
    "RulesConfig",
    "AttemptStageConfig",
    "VerifierStageConfig",
    "StudyConfig",
    "study_task_options",
    "SEQUENCE_SET_BY_STUDY",
    "TOKEN_SET_BY_STUDY",
    "EVAL_SET_BY_STUDY",
    "STUDY_SELECTION",
]

STUDY_SELECTION = "selection"
"""``RulesConfig.decoders``' name for the study's own coverage selection (its ``actions.json``)."""


@dataclass(frozen=True)
class BudgetConfig:
    """The token-budget stage: greedy on validation at each candidate budget."""

    candidates: tuple[int, ...] = ()
    """Budgets measured with greedy on validation first; the smallest whose truncated fraction is
    <= max_truncated replaces the study's token_budget (empty: no budget stage)."""
    problems: int = 100
    """Validation problems of the truncation measurement."""
    max_truncated: float = 0.20
    """Largest fraction of greedy rows a chosen budget may stop before EOS."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_truncated <= 1.0:
            raise ValueError(f"max_truncated must be in [0, 1], got {self.max_truncated}")
        if self.problems < 1:
            raise ValueError(f"budget problems must be >= 1, got {self.problems}")


@dataclass(frozen=True)
class SelectionConfig:
    """The action-selection stage: a candidate pool decoded on validation, K picked by coverage."""

    pool_subsample: int | None = 8
    """Candidates taken evenly from the 180-config pool (greedy is added; none: the whole pool)."""
    problems: int = 32
    """Validation problems the candidates are run on (per domain in a task mix)."""
    samples: int = 4
    """Samples per (problem, action); also the largest parallel budget replay can serve."""
    k: int = 4
    """Size of the selected sequence-level action set."""
    best_problems: int | None = None
    """Validation problems (the first ones, ``samples`` each) on which Best (the best static strategy
    at each pass@k) and the sequence adapters' start actions are chosen, among the finalists the first
    ``problems`` screen (``best_finalists``); the K actions are chosen by coverage on those first
    ``problems``. None: everything on ``problems``."""
    best_finalists: int = 2
    """With ``best_problems``: the candidates with the highest pass@k on the first ``problems``, this
    many per pass@k of the evaluation (greedy always among them), go on to be decoded on the rest."""

    def __post_init__(self) -> None:
        for name in ("problems", "samples", "k"):
            if getattr(self, name) < 1:
                raise ValueError(f"selection {name} must be >= 1, got {getattr(self, name)}")
        if self.best_problems is not None and self.best_problems < self.problems:
            raise ValueError(f"best_problems must be >= problems ({self.problems}) or None, got {self.best_problems}")
        if self.best_finalists < 1:
            raise ValueError(f"best_finalists must be >= 1, got {self.best_finalists}")

    def finalist_rows(self, pool: int, k_values: int) -> int:
        """Rows Best's finalists decode past the first ``problems`` (at most ``best_finalists`` per each
        of ``k_values`` pass@k, and greedy, of a pool of ``pool``): what the plan counts."""
        finalists = min(pool, self.best_finalists * k_values + 1)
        return finalists * (self.choice_problems - self.problems) * self.samples

    @property
    def choice_problems(self) -> int:
        """Validation problems the selection stage decodes: Best's (``best_problems``) or ``problems``."""
        return self.problems if self.best_problems is None else self.best_problems
        if self.pool_subsample is not None and self.pool_subsample < 1:
            raise ValueError(f"pool_subsample must be >= 1 or None, got {self.pool_subsample}")


@dataclass(frozen=True)
class RulesConfig:
    """The fixed-rules stage: sample tables of validation problems (tuning) and of the evaluated
    problems (scoring), every rule tuned on validation at each compute level (docs/rules.md)."""

    enabled: bool = False
    """Run the stage (the study's evaluation then holds every rule's tuned points)."""
    temperatures: tuple[float, ...] = (0.5,)
    """Sampled arms beside greedy, one per temperature (unless ``decoders``); the rules read the
    stopped greedy, then the first sampled arm's samples."""
    decoders: str | None = None
    """Sampled arms beside greedy from an action set instead of the temperatures: a select-actions
    actions.json (its coverage-selected actions, in the order chosen), a preset, or ``selection``:
    the study's own coverage selection (needs ``decoder_count``); greedy dropped. The attempt
    policy then chooses each attempt's arm among them."""
    decoder_count: int | None = None
    """How many of ``decoders``' sampled actions, in its order (None: all)."""
    samples: int = 8
    """Samples N per sampled arm and problem (the greedy arm is decoded once)."""
    problems: int = 400
    """Validation problems of the tuning table (the first of the validation split)."""
    rules: tuple[str, ...] = RULES
    """Rules tuned and scored (``policies.fixed_rules.RULES``)."""
    hidden: bool = False
    """The tables also keep each sample's mean hidden state (the rules read none; a learned policy
    over the same tables may)."""

    def __post_init__(self) -> None:
        if self.samples < 1 or self.problems < 1:
            raise ValueError(f"rules samples and problems must be >= 1, got {self.samples}, {self.problems}")
        if not self.temperatures or any(t <= 0 for t in self.temperatures):
            raise ValueError(f"rules temperatures must be positive and at least one, got {self.temperatures}")
        if self.decoder_count is not None and self.decoders is None:
            raise ValueError("rules decoder_count needs rules decoders")
        if self.decoders == STUDY_SELECTION and self.decoder_count is None:
            raise ValueError(f"rules decoders {STUDY_SELECTION!r} needs rules decoder_count (how many of its actions)")
        if self.decoders is not None and self.decoders != STUDY_SELECTION:
            self.arms  # noqa: B018  (an unreadable action set or too few sampled actions: refused here)
        unknown = [r for r in self.rules if r not in RULES]
        if unknown or not self.rules:
            raise ValueError(f"unknown or no rules {unknown}; choose from {list(RULES)}")

    @property
    def arms(self) -> list[DecodingAction]:
        """Greedy, then the sampled arms (``decoders``', else one per temperature)."""
        if self.decoders == STUDY_SELECTION:
            raise ValueError(f"rules decoders {STUDY_SELECTION!r} are known once the study's selection ran "
                             "(StudyConfig.with_selected_decoders)")
        return table_arms(self.temperatures, self.decoders, self.decoder_count)

    @property
    def sampled_arms(self) -> int:
        """How many sampled arms the tables hold beside greedy."""
        if self.decoders == STUDY_SELECTION:
            return self.decoder_count
        return len(self.arms) - 1

    @property
    def rows_per_problem(self) -> int:
        """Decoded rows per problem of a table: greedy once, each sampled arm ``samples`` times."""
        return 1 + self.sampled_arms * self.samples


@dataclass(frozen=True)
class AttemptStageConfig:
    """The attempt-policy stage, after the fixed rules: the learned attempt policy (docs/attempt.md)
    trained on a table of training problems under the rules' arms, kept-best on the rules'
    validation table and scored on their evaluation table, one policy per price per decode."""

    enabled: bool = False
    """Run the stage (needs the fixed-rules stage: it reads its tables)."""
    train_problems: int = 400
    """Training problems of its table (the first of the train split)."""
    prices: tuple[float, ...] = (0.02, 0.05, 0.1)
    """Prices per decode, one policy each (its point on the accuracy-per-compute curve)."""
    features: tuple[str, ...] = ("confidence", "agreement")
    """What the policy reads (``policies.attempt.ATTEMPT_FEATURE_SETS``; ``hidden`` needs ``--rules.hidden``)."""
    steps: int = 300
    """Training steps per policy."""
    seed: int = 0
    """First training seed: the stage trains one policy per price for each of the study's ``seeds``
    training seeds from this one."""

    def __post_init__(self) -> None:
        if self.train_problems < 1 or self.steps < 0 or not self.prices or any(p < 0 for p in self.prices):
            raise ValueError("attempt train_problems must be >= 1, steps >= 0 and prices non-negative (at least one)")


@dataclass(frozen=True)
class VerifierStageConfig:
    """The verifier stage, after the fixed rules: a verifier (``policies.verifier``) trained on a table
    of training problems under the rules' arms, its ranking quality per family, and every rule's
    variant that reads it tuned on the rules' validation table and scored on their evaluation table,
    beside the plain rules (the strongest rule at a compute is chosen among all of them)."""

    enabled: bool = False
    """Run the stage (needs the fixed-rules stage: it reads its tables)."""
    train_problems: int = 400
    """Training problems of its table (the first of the train split; the attempt stage's table when both run)."""
    rules: tuple[str, ...] = VERIFIER_RULES
    """Verifier-reading rules tuned and scored (``policies.fixed_rules.VERIFIER_RULES``); the verifier is
    trained at ``training.verifier.VerifierTrainConfig``'s defaults (``train-verifier`` trains others)."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.rules if r not in VERIFIER_RULES]
        if self.train_problems < 1 or unknown or not self.rules:
            raise ValueError(f"verifier train_problems must be >= 1 and rules among {list(VERIFIER_RULES)} (got "
                             f"{unknown or 'none'})")


# Nested-config fields a study sets for each run (which variant, seed, action set, replay table) or
# takes from its own (its protocol: token budget and stop; the evaluation's seeds): not command-line options.
SEQUENCE_SET_BY_STUDY = ("actions", "use_budget", "token_budget", "replay", "seed", "stop_at_answer")
TOKEN_SET_BY_STUDY = ("actions", "use_budget", "features", "token_budget", "seed", "stop_at_answer")
EVAL_SET_BY_STUDY = ("token_budget", "seeds", "stop_at_answer")


@dataclass(frozen=True)
class StudyConfig:
    """Sizes of every stage of a study."""

    token_budget: int = DEFAULT_TOKEN_BUDGET
    """Max new tokens per completion everywhere (replaced by the budget stage's choice when
    budget.candidates is set); part of the study's ``protocol``."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Every sample of every stage (selection, training rollouts, validation, the draft stage's
    tables, evaluation) ends at the task's first complete answer; part of the study's ``protocol``
    and recorded in every adapter. False (``--no-stop-at-answer``) decodes to the token budget."""
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    """token budget stage"""
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    """action selection"""
    sequence_rewards: Literal["replay", "live"] = "replay"
    """Rewards of the sequence adapters: offline replay of the selection table, or live rollouts."""
    sequence: SequenceTrainConfig = field(default_factory=lambda: SequenceTrainConfig(parallel_budgets=(1, 2, 4)),
                                          metadata={"exclude": SEQUENCE_SET_BY_STUDY})
    """sequence adapters"""
    token: TokenTrainConfig = field(default_factory=TokenTrainConfig, metadata={"exclude": TOKEN_SET_BY_STUDY})
    """token adapters"""
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"exclude": EVAL_SET_BY_STUDY})
    """evaluation"""
    eval_problems: int = 32
    """Test problems of every evaluated split."""
    eval_split: str = "test"
    """The split every method is evaluated on (its first ``eval_problems``): ``test``, or a held-out
    split of the task that only the published evidence run reads (``reproduce --size full``)."""
    train_size: int | None = None
    """Problems the generated task makes for its train split (``arithmetic``'s ``train_size``; None:
    the task's default): enough that ``token.min_train_prompts`` survive the token trainer's filter."""
    validation_size: int | None = None
    """Problems the generated task makes for its validation split (None: the task's default); the
    first ones stay the same problems whatever the size, and test does not change."""
    seeds: int = 3
    """Training seeds of every adapter, and evaluation seeds."""
    batch_rows: int = 128
    """Rows decoded together: on a CPU, bigger batches give more tokens per second."""
    threads: int = 0
    """torch CPU threads (1 is fastest on a shared, loaded machine; 0 keeps torch's default)."""
    draft_stage: bool = False
    """Also train the draft-gated adapter (one per seed) and evaluate it beside a random gate at its
    re-decode share and a confidence threshold tuned on validation."""
    draft_features: Literal["confidence", "mean", "hidden"] = "mean"
    """What the draft-gated adapter reads of the greedy draft (docs/draft-gated.md)."""
    draft_samples: int = 4
    """Re-decodes per problem in the draft stage's both-arms tables (one re-decode action: the
    selected set's Best at the largest k, else its first sampled action)."""
    rules: RulesConfig = field(default_factory=RulesConfig)
    """fixed rules over stored sample tables"""
    attempt: AttemptStageConfig = field(default_factory=AttemptStageConfig)
    """the learned attempt policy over the fixed rules' tables"""
    verifier: VerifierStageConfig = field(default_factory=VerifierStageConfig)
    """the learned verifier and the rules that read it, over the fixed rules' tables"""

    def __post_init__(self) -> None:
        self._check_stages()
        self._check_sizes()
        # one protocol (validated once) for every stage: the nested configs keep its fields flat, as
        # their own commands and study_config.json have them, and take it whole
        protocol = self.protocol
        object.__setattr__(self, "sequence", protocol.onto(self.sequence))
        object.__setattr__(self, "token", protocol.onto(self.token))
        object.__setattr__(self, "eval", replace(protocol.onto(self.eval), seeds=self.seeds))

    def _check_stages(self) -> None:
        """The stages fit together: each reads what an enabled stage before it writes."""
        if self.sequence_rewards not in ("replay", "live"):
            raise ValueError(f"sequence_rewards must be 'replay' or 'live', got {self.sequence_rewards!r}")
        if self.attempt.enabled and not self.rules.enabled:
            raise ValueError("the attempt-policy stage reads the fixed-rules stage's tables: enable --rules.enabled")
        if self.verifier.enabled and not self.rules.enabled:
            raise ValueError("the verifier stage reads the fixed-rules stage's tables: enable --rules.enabled")
        both = self.verifier.enabled and self.attempt.enabled
        if both and self.verifier.train_problems != self.attempt.train_problems:
            raise ValueError("the verifier and attempt stages share one training table: give them the same "
                             "train_problems")
        if "hidden" in self.attempt.features and not self.rules.hidden:
            raise ValueError("an attempt policy that reads hidden states needs tables that keep them (--rules.hidden)")
        if self.sequence_rewards == "replay" and max(self.sequence.parallel_budgets) > self.selection.samples:
            raise ValueError("offline replay serves budgets B up to selection.samples: raise it or use "
                             "sequence_rewards=live")

    def _check_sizes(self) -> None:
        """Counts are positive and the evaluated split is held out."""
        for name in ("eval_problems", "seeds", "batch_rows", "draft_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_split in ("train", "validation"):
            raise ValueError(f"eval_split must be a held-out split, not {self.eval_split!r}: the study trains and "
                             "chooses on train and validation")
        for name in ("train_size", "validation_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {getattr(self, name)}")

    @property
    def protocol(self) -> DecodingProtocol:
        """The token budget and the stop at the first answer every stage decodes under."""
        return DecodingProtocol(self.token_budget, self.stop_at_answer)

    def with_selected_decoders(self, actions_json: Path) -> "StudyConfig":
        """The study with ``rules.decoders`` ``selection`` read from its selection's ``actions_json``."""
        if self.rules.decoders != STUDY_SELECTION:
            return self
        return replace(self, rules=replace(self.rules, decoders=str(actions_json)))


def study_task_options(cfg: StudyConfig) -> dict:
    """``get_task`` options of a study's generated task: the split sizes it sets."""
    return {name: getattr(cfg, name) for name in ("train_size", "validation_size") if getattr(cfg, name) is not None}
