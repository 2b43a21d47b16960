"""The study's plan: minutes per stage from a model of decoded rows fitted on the reference machine
and scaled by the decode probe (``probe``), the sizes cut to fit ``--minutes`` on a slower machine,
and the re-plan of the later stages when the finished ones ran slower than planned."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from ..core.files import write_json
from ..policies.attempt import lattice_states
from ..training.token import PROBE_ROUND_FACTOR
from . import pipeline
from .presets import DRAFT_TRAINING, TOKEN_VARIANTS, pool_size
from .probe import REFERENCE_PROBE_TOKENS_PER_SECOND, DecodeProbe
from .study_config import StudyConfig

__all__ = ["estimate_minutes", "plan_range", "plan_advice", "FIT_LADDER", "scaled_sizes", "fit_to_minutes", "fit_note",
           "replan"]


DECODE_TOKENS_PER_SECOND = 220.0
"""Decoded tokens per second of the default model on the 2-core CPU with batches of ~128 short
arithmetic rows. Measured on a shared machine, so from CPU time with one thread
(130-152 tokens per CPU-second for 128 sampled rows at budget 48; 84 for 100 greedy rows whose
batch shrinks as they finish) and scaled by 1.5 for the second core; see cli/reproduce.py.
Token-adapter rollouts, which record hidden states and run the policy at every step, are charged
TOKEN_ROLLOUT_OVERHEAD more (the decode benchmark's adapter/fixed ratio with recording on top)."""
TOKEN_ROLLOUT_OVERHEAD = 1.15
POOL_ROW_OVERHEAD = 1.5
"""Pool rows mix top-k / top-p / min-p actions (a sort of the vocabulary per row and step): 96
tokens per CPU-second for 128 rows of the 180 pool against ~150 for temperature-only rows."""
MEAN_SAMPLED_LENGTH = 0.75
"""Mean generated length of a sampled row as a fraction of the token budget (measured at budget 48
on validation: T=0.5 0.57, T=1.0 0.74, T=1.25 0.89; greedy 0.56 at budget 64)."""
STAGE_SCALE = {"budget": 0.28, "select": 0.37, "sequence": 0.43, "token": 0.26, "evaluate": 0.28, "draft": 0.37,
               "rules": 0.37, "attempt": 0.37, "verifier": 0.37}
"""Measured over planned minutes of each decoding stage (the model above at the constants above),
fitted on the reference machine (probe 440 tok/s), ``reproduce`` at budget 48 idle: budget 0.12 of
0.40, selection 5.2 of 17.8, sequence 15.1 of 35.2, token 34.1 of 133.4, evaluation 30.7 of 111.2
minutes; for the selection, with the demo at budget 64 (1.9 of 6.3: the geometric mean of the two
ratios). Rows end earlier than MEAN_SAMPLED_LENGTH and methods share decoded rows (greedy and
greedy-only adapters once), so every stage runs faster than the row model; near-greedy token
rollouts end earliest (0.56 of the budget). On a slower machine the probe scales every stage alike
(docs/reproduce/stage_minutes.json: a run at probe 0.59 of the reference). The rules, verifier and
attempt stages decode tables as the draft stage does, so they take its scale until a run measures theirs."""
SECONDS_PER_CALL = 1.0  # fixed cost of one small decode call (prefill, Python, scoring): tiny steps pay it
ATTEMPT_STEP_SECONDS, ATTEMPT_STATE_SECONDS = 0.0145, 0.0005
"""One attempt-policy training step (its share of the validations included) on a 400-problem table
costs about ``ATTEMPT_STEP_SECONDS + ATTEMPT_STATE_SECONDS x lattice states`` on one thread: 0.019 s
at 9 states (greedy + 8 of one arm), 0.197 s at 361 (greedy + 8 of each of three), measured on the
2-core reference-class machine beside other work (no decoding: the probe does not scale it)."""


def _decode_minutes(rows: float, cfg: StudyConfig, overhead: float = 1.0, calls: float = 0.0) -> float:
    tokens = rows * cfg.token_budget * MEAN_SAMPLED_LENGTH
    return (tokens * overhead / DECODE_TOKENS_PER_SECOND + calls * SECONDS_PER_CALL) / 60


def _small_batch_cost(rows_per_call: int, reference_rows: int) -> float:
    """Cost per row of decoding in calls of ``rows_per_call`` rows, relative to the ``reference_rows``
    the token stage's scale was fitted at (``reproduce``: 64-row steps, 96-row validations): a smaller
    batch runs the same matmuls at a lower rate. The square root is fitted on the demo's token stage
    (32-row calls), which ran 1.35-1.48 x what the reference rate planned (10.0 and 11.1 minutes at a
    probe 0.67 x the reference)."""
    return math.sqrt(max(reference_rows / rows_per_call, 1.0))



def plan_range(cfg: StudyConfig, probe: DecodeProbe) -> tuple[float, float]:
    """Total planned minutes at the machine's capacity and at the speed the probe saw now."""
    return (sum(estimate_minutes(cfg, probe.capacity).values()),
            sum(estimate_minutes(cfg, probe.tokens_per_second).values()))


def plan_advice(cfg: StudyConfig, fitted: StudyConfig, minutes: float | None, probe: DecodeProbe) -> str:
    """What to do when the plan cannot meet ``minutes`` ('' when it can): the load to wait out, or the
    minutes the smallest sizes need here, or a smaller preset."""
    low, high = plan_range(fitted, probe)
    notes = []
    if minutes and low > minutes:
        notes.append(f"even the smallest sizes the fit allows take about {low:.0f} min on this machine, over "
                     f"--minutes {minutes:g}: give --minutes {math.ceil(low)} (or more), try --size tiny to check "
                     "the pipeline only, or use a faster machine (a GPU, or a CPU with AVX512-BF16 runs bf16)")
    if probe.busy and high > max(low * 1.1, low + 0.5):
        notes.append(f"the machine is busy now (load {probe.load if probe.load is not None else 0:.1f} on "
                     f"{probe.cpus} CPUs): at the speed the probe saw, the run would take up to {high:.0f} min; it "
                     "re-plans from the stages it has finished and cuts the later stages' sizes to keep within "
                     "--minutes, or run it when the other work has ended")
    return "; ".join(notes)


def estimate_minutes(cfg: StudyConfig, tokens_per_second: float | None = None) -> dict[str, float]:
    """Planned minutes of every stage (used for the progress line's time left; ``demo --plan`` and
    ``reproduce --plan`` print it). A model of decoded rows x mean length / throughput, fitted on
    the reference machine; ``tokens_per_second`` (:func:`probe_tokens_per_second` on this machine)
    scales the decoding stages by how much slower or faster this machine is."""
    pool = pool_size(cfg)
    seq, tok = cfg.sequence, cfg.token
    mean_b = sum(seq.parallel_budgets) / len(seq.parallel_budgets)
    seq_runs = 2 * cfg.seeds
    if cfg.sequence_rewards == "live":
        # validation: every problem at every B, the first one in full (B rows per problem and B
        # at most), later ones only the (problem, action) pairs the policy moved to
        val_calls = seq.steps // seq.val_every + 1
        val_rows = seq.val_problems * (sum(seq.parallel_budgets) + (val_calls - 1) * mean_b)
        seq_rows = seq_runs * (seq.steps * seq.prompts_per_step * mean_b + val_rows)
        sequence = _decode_minutes(seq_rows, cfg, calls=seq_runs * (seq.steps + val_calls))
    else:
        sequence = seq_runs * seq.steps * 0.02 / 60  # offline replay: no decoding, ~10 ms a step
    tok_runs = len(TOKEN_VARIANTS) * cfg.seeds
    steps = tok.steps
    if tok.patience:  # early stopping: no token run on the default task has beaten its step-0 validation,
        steps = min(steps, tok.patience * tok.val_every)  # so every one stopped at the first chance
    vals = steps // tok.val_every + 1  # step 0 is validated too
    step_rows, val_call_rows = tok.prompts_per_step * tok.group_size, tok.val_problems * tok.val_samples
    val_rows = vals * val_call_rows * len(tok.val_modes)
    tok_rows = tok_runs * (steps * step_rows * _small_batch_cost(step_rows, 64)
                           + val_rows * _small_batch_cost(val_call_rows, 96))
    token = _decode_minutes(tok_rows, cfg, TOKEN_ROLLOUT_OVERHEAD, calls=tok_runs * (steps + vals))
    if tok.filter_samples:  # the start policy's probe: about PROBE_ROUND_FACTOR prompts per prompt wanted
        # (it keeps about a third of the prompts on the default task)
        wanted = min(tok.min_train_prompts, tok.steps * tok.prompts_per_step)
        probed = min(PROBE_ROUND_FACTOR * wanted, tok.max_train_prompts or PROBE_ROUND_FACTOR * wanted)
        token += _decode_minutes(probed * tok.filter_samples, cfg)
    n = max(cfg.eval.k_values) * cfg.eval_problems * cfg.seeds
    # static rows: Best, Mixed (K actions), token Mixed, best token action, the sequence adapters'
    # picks (shared with those where the action is the same: ~2 more actions' worth)
    # (+ one greedy row per problem, and one stopped at its first answer)
    static_rows = n * 5 + 2 * cfg.eval_problems
    evaluation = _decode_minutes(static_rows, cfg) + _decode_minutes(n * 3, cfg, TOKEN_ROLLOUT_OVERHEAD)
    budget = 0.0
    if cfg.budget.candidates:  # greedy rows once at the largest candidate (about half of it is used)
        budget = cfg.budget.problems * max(cfg.budget.candidates) * 0.5 / DECODE_TOKENS_PER_SECOND / 60
    slower = 1.0 if tokens_per_second is None else REFERENCE_PROBE_TOKENS_PER_SECOND / tokens_per_second
    decoding = {
        "budget": budget,
        # the pool's samples, then greedy stopped at its first answer once per problem (a Best candidate)
        "select": _decode_minutes(pool * cfg.selection.problems * cfg.selection.samples, cfg, POOL_ROW_OVERHEAD)
        + _decode_minutes(cfg.selection.problems, cfg)  # and Best's finalists on more problems:
        + _decode_minutes(cfg.selection.finalist_rows(pool, len(cfg.eval.k_values)), cfg, POOL_ROW_OVERHEAD),
        "sequence": sequence,
        "token": token,
        "evaluate": evaluation,
    }
    if cfg.draft_stage:  # both-arms tables: a draft and draft_samples re-decodes per training and validation problem
        table_rows = ((seq.max_train_prompts or 256) + seq.val_problems) * (1 + cfg.draft_samples)
        decoding["draft"] = _decode_minutes(table_rows, cfg) + cfg.seeds * DRAFT_TRAINING["steps"] * 0.05 / 60
        decoding["evaluate"] += _decode_minutes(cfg.eval_problems, cfg)  # the draft pass
    if cfg.rules.enabled:  # the two sample tables: the stopped greedy and N samples per sampled arm and problem
        per_problem = cfg.rules.rows_per_problem  # the tuning itself takes seconds
        decoding["rules"] = _decode_minutes((cfg.rules.problems + cfg.eval_problems) * per_problem, cfg)
        if cfg.attempt.enabled or cfg.verifier.enabled:  # their training table, decoded by the first (as the rules')
            first = "verifier" if cfg.verifier.enabled else "attempt"  # fitting is seconds
            decoding[first] = _decode_minutes(getattr(cfg, first).train_problems * per_problem, cfg)
    scaled = {stage: minutes * STAGE_SCALE[stage] * slower for stage, minutes in decoding.items()}
    if cfg.attempt.enabled:
        scaled["attempt"] = _attempt_minutes(cfg)
    return {"load": 0.1, **scaled, "report": 0.1}


def _attempt_minutes(cfg: StudyConfig) -> float:
    """The attempt stage's training: one policy per price and seed over every arm, and with two or more
    sampled arms the same per single arm (the decoder-choice ablation), each ``attempt.steps`` steps
    at the cost of its lattice (``ATTEMPT_STEP_SECONDS``); its table is the verifier's (decoded there)."""
    samples, arms = cfg.rules.samples, cfg.rules.sampled_arms
    policies = len(cfg.attempt.prices) * cfg.seeds

    def step(sampled_arms: int) -> float:
        states = lattice_states((1,) + (samples,) * sampled_arms, 0, 1 + samples)
        return ATTEMPT_STEP_SECONDS + ATTEMPT_STATE_SECONDS * states

    seconds = policies * cfg.attempt.steps * (step(arms) + (arms * step(1) if arms >= 2 else 0.0))
    return seconds / 60


FIT_LADDER = (
    (1.0, 1.0, 1.0, 1.0), (0.75, 1.0, 1.0, 1.0), (0.5, 1.0, 1.0, 1.0), (0.33, 1.0, 1.0, 1.0),
    (0.33, 1.0, 0.67, 1.0), (0.33, 1.0, 0.34, 1.0), (0.33, 1.0, 0.34, 0.5), (0.25, 1.0, 0.34, 0.5),
    (0.25, 0.75, 0.34, 0.5), (0.25, 0.5, 0.34, 0.5), (0.25, 0.33, 0.34, 0.5), (0.25, 0.25, 0.34, 0.5),
)
"""The (token-training steps, problems, seeds, selection samples) factors ``fit_to_minutes`` tries,
in order: training steps, then seeds, then selection samples are cut before any problem, since the
evaluation's and the selection's problems decide how wide every interval in the table is (at 8
problems the intervals are about ±45 points and nothing can be told apart)."""


def scaled_sizes(cfg: StudyConfig, steps_scale: float, problems_scale: float, seeds_scale: float = 1.0,
                 samples_scale: float = 1.0) -> StudyConfig:
    """``cfg`` with the sizes that trade evidence for time multiplied (never raised): token-training
    steps by ``steps_scale`` (rounded down to whole validation intervals, at least one), evaluation
    and selection problems by ``problems_scale`` (rounded down to multiples of 8, at least 8), seeds
    by ``seeds_scale`` (rounded, at least 1) and the selection's samples per problem by
    ``samples_scale`` (at least 2, and at least the largest B offline replay serves). Everything
    else, the token budget and every rate included, stays."""
    tok, sel = cfg.token, cfg.selection
    steps = min(tok.steps, max(tok.val_every, int(tok.steps * steps_scale) // tok.val_every * tok.val_every))

    def problems(n: int) -> int:
        return min(n, max(8, int(n * problems_scale) // 8 * 8))

    seeds = min(cfg.seeds, max(1, round(cfg.seeds * seeds_scale)))
    # offline replay serves budgets B up to the selection's samples
    replayed = max(cfg.sequence.parallel_budgets) if cfg.sequence_rewards == "replay" else 2
    samples = min(sel.samples, max(2, replayed, int(sel.samples * samples_scale)))
    fitted = replace(cfg, token=replace(tok, steps=steps), eval_problems=problems(cfg.eval_problems), seeds=seeds,
                     selection=replace(sel, problems=problems(sel.problems), samples=samples))
    return cfg if fitted == cfg else fitted


def fit_to_minutes(cfg: StudyConfig, tokens_per_second: float | None,
                   minutes: float) -> tuple[StudyConfig, tuple[float, ...]]:
    """The first of ``FIT_LADDER`` whose ``scaled_sizes`` plan (``estimate_minutes`` at this machine's
    probe) takes at most ``minutes``, and that config; the last rung when none does. Trades how much
    the demo shows for time on slower CPUs (e.g. an AVX2-only one decoding fp32): the evidence lives
    in ``reproduce``, which is never fitted."""
    for rung in FIT_LADDER:
        fitted = scaled_sizes(cfg, *rung)
        if sum(estimate_minutes(fitted, tokens_per_second).values()) <= minutes:
            break
    return fitted, rung


def _cuts(sizes: list[tuple[str, int, int]]) -> list[str]:
    """``label before -> after`` for each (label, before, after) size that changed."""
    cuts = []
    for label, before, after in sizes:
        if before != after:
            cuts.append(f"{label} {before} -> {after}")
    return cuts


def fit_note(cfg: StudyConfig, fitted: StudyConfig, minutes: float, tokens_per_second: float) -> str:
    """One sentence saying which sizes ``fit_to_minutes`` cut, and why ('' when none)."""
    cuts = _cuts([
        ("token-training steps", cfg.token.steps, fitted.token.steps),
        ("seeds", cfg.seeds, fitted.seeds),
        ("selection samples", cfg.selection.samples, fitted.selection.samples),
        ("evaluation problems", cfg.eval_problems, fitted.eval_problems),
        ("selection problems", cfg.selection.problems, fitted.selection.problems),
    ])
    if not cuts:
        return ""
    planned = sum(estimate_minutes(fitted, tokens_per_second).values())
    short = "" if planned <= minutes else " (the smallest sizes the fit allows: still longer)"
    return (f"Sizes cut to fit {minutes:g} minutes on this machine (decode probe {tokens_per_second:.0f} tok/s, "
            f"{tokens_per_second / REFERENCE_PROBE_TOKENS_PER_SECOND:.2f} x the reference): "
            + ", ".join(cuts) + f"; planned {planned:.1f} minutes{short}.")


REPLAN_LADDER = ((1.0, 1.0), (0.75, 1.0), (0.5, 1.0), (0.33, 1.0), (0.25, 1.0), (0.25, 0.75), (0.25, 0.5))
"""The (token-training steps, evaluation problems) factors ``replan`` tries, in order."""


def _replanned(cfg: StudyConfig, clock: pipeline.StageClock, minutes: float, tokens_per_second: float,
               stages: tuple[str, ...]) -> tuple[StudyConfig, str]:
    """The sizes of ``stages`` that fit the minutes left at the pace the finished stages kept, and the
    report's sentence ('' when nothing was cut)."""
    done = {k: v for k, v in clock.total_minutes().items() if k in clock.plan and k != "load"}
    planned = sum(clock.plan[k] for k in done)
    pace = sum(done.values()) / planned if planned >= 0.5 else 1.0
    left = minutes - sum(clock.total_minutes().values())
    if pace <= 1.0:
        return cfg, ""
    for steps_scale, problems_scale in REPLAN_LADDER:
        fitted = scaled_sizes(cfg, steps_scale if "token" in stages else 1.0, problems_scale)
        chosen = replace(cfg, token=fitted.token, eval_problems=fitted.eval_problems)
        plan = estimate_minutes(chosen, tokens_per_second)
        if sum(plan[k] for k in stages if k in plan) * pace <= left:
            break
    cuts = _cuts([("token-training steps", cfg.token.steps, chosen.token.steps),
                  ("evaluation problems", cfg.eval_problems, chosen.eval_problems)])
    if not cuts:
        return chosen, ""
    return chosen, (f"Re-planned before the {stages[0]} stage from the finished stages (they ran at "
                    f"{pace:.1f} x their plan, {left:.1f} of {minutes:g} minutes left): " + ", ".join(cuts) + ".")


def replan(cfg: StudyConfig, clock: pipeline.StageClock, minutes: float, tokens_per_second: float, path: Path,
           stages: tuple[str, ...]) -> tuple[StudyConfig, str]:
    """``cfg`` with the sizes of ``stages`` (still to run: token-training steps, evaluation problems)
    cut, when the finished stages ran slower than planned so far that the rest would pass
    ``minutes``: the plan of the stages left, scaled by the pace the finished ones kept (their real
    over their planned minutes), must fit in the minutes left. The choice is written to ``path`` at
    the first decision and read back on a resume, so a resumed run keeps the sizes it trained with.
    Returns the config and a sentence for the report ('' when nothing was cut)."""
    record = json.loads(path.read_text()) if path.is_file() else {}
    key = ",".join(stages)
    if key not in record:
        chosen, sentence = _replanned(cfg, clock, minutes, tokens_per_second, stages)
        record[key] = {"token_steps": chosen.token.steps, "eval_problems": chosen.eval_problems, "note": sentence}
        write_json(path, record)
        if sentence:
            print(sentence, flush=True)
    chosen = record[key]
    cfg = replace(cfg, token=replace(cfg.token, steps=min(cfg.token.steps, chosen["token_steps"])),
                  eval_problems=min(cfg.eval_problems, chosen["eval_problems"]))
    replanned = estimate_minutes(cfg, tokens_per_second)
    clock.plan = {**clock.plan, **{k: v for k, v in replanned.items() if k in stages}}
    return cfg, chosen["note"]
