"""The stages that score stored samples: the fixed rules, the learned attempt policy and the learned
verifier, over the sample tables built once under a study's folder.

- **rules** (:func:`rule_tables`, :func:`fixed_rules`): sample tables of validation problems and of
  the evaluated problems (shared by every stage that scores stored samples), every fixed rule tuned
  on validation per compute level and its points added to the evaluation as methods of family
  ``fixed rule``;
- **attempt** (:func:`attempt_stage`): the attempt policy trained on a table of training problems,
  scored against the rules at matched compute;
- **verifier** (:func:`verifier_stage`): a verifier trained on a table of training problems, its
  quality per family, and every rule's variant that reads it added beside the plain rules
  (``"reads_verifier": true``).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.files import write_json
from ..evaluation import (
    Evaluation,
)
from ..evaluation.attempt import rule_baselines, seed_agreement, thin_table_warning, train_and_score
from ..evaluation.decoder_choice import decoder_ablation, single_arm_dir, single_arm_runs
from ..evaluation.rules import fit_calibrations, greedy_then, tune_rules
from ..evaluation.sample_table import SampleTable, build_sample_table
from ..evaluation.verifier import crossfit_table_scores, fit_on_table, ranking_quality, table_scores
from ..policies.fixed_rules import RULE_LABELS, RULES, reads_verifier, score_setting, setting_from_dict
from ..policies.verifier import load_verifier
from ..reporting.rules import SENTENCE_LEVELS
from ..training.attempt import AttemptTrainConfig
from ..training.verifier import VerifierTrainConfig
from .study_config import StudyConfig

__all__ = [
    "RULE_TABLE_KEY",
    "rule_tables",
    "study_table",
    "rule_entries",
    "add_rule_entries",
    "fixed_rules",
    "attempt_entries",
    "attempt_stage",
    "problem_families",
    "verifier_stage",
]

log = logging.getLogger(__name__)


# ---- fixed rules ---------------------------------------------------------------------------------

RULE_TABLE_KEY = "sample_tables"
"""The key of an ``eval_details.json`` method entry added from stored sample tables (a fixed rule's
tuned point): the tables it was tuned and scored on. The evaluation's own methods have none."""


def rule_tables(lm, task, cfg: StudyConfig, out: Path, problems, *, progress: bool = False,
                on_chunk=None, engine=None) -> tuple[SampleTable, SampleTable]:
    """The validation table (the first ``cfg.rules.problems`` validation problems) and the evaluation
    table (``problems``, the evaluated ones, in their order) under ``cfg.rules.arms``, each
    ``cfg.rules.samples`` per sampled arm, in ``out/validation`` and ``out/test``: built chunk by
    chunk where missing (a rerun after a kill keeps the chunks written), read back where there.
    Any stage that scores stored samples reads these two tables; none decodes them again. ``engine``:
    where the chunks are decoded (``decoding.table_engines``; None: ``lm`` in this process)."""
    validation = study_table(lm, task, cfg, Path(out) / "validation", "validation",
                             task.load("validation")[: cfg.rules.problems], progress=progress, on_chunk=on_chunk,
                             engine=engine)
    test = study_table(lm, task, cfg, Path(out) / "test", cfg.eval_split, problems, progress=progress,
                       on_chunk=on_chunk, engine=engine)
    return validation, test


def study_table(lm, task, cfg: StudyConfig, path: Path, split: str, problems, *, progress: bool = False,
                on_chunk=None, engine=None) -> SampleTable:
    """One sample table of ``problems`` (of ``split``) under the study's arms and settings
    (``cfg.rules``: arms, samples, hidden; the study's token budget and stop; seed 0) in ``path``:
    built chunk by chunk where missing, read back where there (a table made under other settings is
    refused). A stage that needs another split's table (a learned policy's training problems) builds
    it with this, beside the rules' two."""
    rc = cfg.rules
    return build_sample_table(lm, task, list(problems), rc.arms, samples=rc.samples, token_budget=cfg.token_budget,
                              path=path, split=split, seed=0, stop_at_answer=cfg.stop_at_answer, hidden=rc.hidden,
                              chunk_problems=max(1, cfg.batch_rows // rc.rows_per_problem), progress=progress,
                              on_chunk=on_chunk, engine=engine)


def rule_entries(validation: SampleTable, test: SampleTable, rules: Sequence[str] = RULES,
                 tables: dict | None = None,
                 verifier: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[dict, dict]:
    """Every rule tuned on ``validation`` per compute level (``evaluation.rules.tune_rules``; the
    stopped greedy, then the first sampled arm's samples) and scored on ``test``: ``(entries,
    curves)``. ``entries[name]`` is one method per tuned point in the shape of the evaluation's
    (``methods``, ``per_problem``, ``compute``: see ``evaluation.runner``), named ``"<rule> (<= L
    decodes)"`` with ``curve`` the rule's label; ``curves`` is ``tune_rules``'s output. The rules
    that read the verifier (``VERIFIER_RULES``) need ``verifier``, its scores ``[P, A, N]`` of the
    validation and the test table; their entries carry ``"reads_verifier": true``."""
    arm = next(name for name, a in zip(validation.arm_names, validation.actions) if not a.is_greedy)
    plain, reading = [r for r in rules if not reads_verifier(r)], [r for r in rules if reads_verifier(r)]
    groups = [(plain, greedy_then(validation, arm), greedy_then(test, arm))] if plain else []
    if reading:
        if verifier is None:
            raise ValueError(f"the rules {reading} read the verifier: give its scores of both tables")
        groups.append((reading, greedy_then(validation, arm, verifier=verifier[0]),
                       greedy_then(test, arm, verifier=verifier[1])))
    entries, curves = {}, {}
    for group, val_draws, test_draws in groups:
        tuned = tune_rules(val_draws, test_draws, rules=group)
        curves.update(tuned)
        entries.update(_rule_points(tuned, val_draws, test_draws, test, tables))
    return entries, curves


def _rule_points(curves: dict, val_draws, test_draws, test: SampleTable, tables: dict | None) -> dict:
    """:func:`rule_entries`' entries of one group of rules tuned on the same draws."""
    calibrations = fit_calibrations(val_draws)  # what tune_rules scored test with
    entries = {}
    for rule, curve in curves.items():
        for point in curve["points"]:
            result = score_setting(setting_from_dict(point["setting"]), test_draws, calibrations)
            correct = test_draws.correct(result.answers).astype(float)
            decodes, tokens = result.decodes.astype(float), result.tokens.astype(float)
            name = f"{RULE_LABELS[rule]} (<= {point['level']:g} decodes)"
            entries[name] = {
                "method": {"kind": "rule", "role": "fixed rule", "level": "sequence", "family": "fixed rule",
                           "curve": RULE_LABELS[rule], "rule": rule, "setting": _json_setting(point["setting"]),
                           "compute_level": point["level"], "validation": point["validation"],
                           "answer_rule": f"{RULE_LABELS[rule]} over {test_draws.label}",
                           "actions": [a.name for a in test.actions],
                           "stop_at_answer": test.header.get("stop_at_answer"),
                           "seeds": "one sample table (seed 0): one value per problem, the same for every seed",
                           RULE_TABLE_KEY: tables or {},
                           "decodes_per_problem": {"answer": float(decodes.mean())},
                           "tokens_per_problem": {"answer": float(tokens.mean())},
                           **({"reads_verifier": True} if reads_verifier(rule) else {})},
                # [problem][seed]: the table is one draw of the samples (seed 0), so one column
                "per_problem": {"answer_accuracy": [[float(c)] for c in correct]},
                "compute": {"decodes": {"answer": decodes.tolist()}, "tokens": {"answer": tokens.tolist()}},
            }
    return entries


def _json_setting(setting: dict) -> dict:
    """A tuned setting with its non-finite thresholds ('never keep the draft') as strings: strict JSON."""
    return {k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in setting.items()}


def add_rule_entries(evaluation: Evaluation, entries: dict, family: str = "fixed rule",
                     verifier: bool = False) -> Evaluation:
    """``evaluation`` with the points ``entries`` (:func:`rule_entries`, :func:`attempt_entries`) in
    its eval_details, replacing those of the same ``family`` added from sample tables before that
    read the verifier as ``verifier`` says (the plain rules' and the verifier rules' stages replace
    their own) (results.json keeps the evaluation's own methods: a curve of many points is drawn and
    compared from eval_details, not listed as rows)."""
    details = json.loads(json.dumps(evaluation.details))  # a copy
    details["sentence_levels"] = list(SENTENCE_LEVELS)  # where the report sets the learned curves against the rules
    added_before = {n for n, m in details.get("methods", {}).items()
                    if RULE_TABLE_KEY in m and m.get("family", "fixed rule") == family
                    and bool(m.get("reads_verifier", False)) == verifier}
    for section, key in (("methods", "method"), ("per_problem", "per_problem"), ("compute", "compute")):
        details[section] = _replace_in_place(details.get(section, {}), added_before,
                                             {n: e[key] for n, e in entries.items()})
    return Evaluation(evaluation.results, details)


def _replace_in_place(old: dict, dropped: set, new: dict) -> dict:
    """``old`` without the names in ``dropped``, each name in ``new`` given its new value where it
    stood, the rest of ``new`` after: a resumed run that adds the same points again writes
    eval_details in the order the first run wrote it (so it is not rewritten)."""
    merged = {}
    for name, value in old.items():
        if name in new:
            merged[name] = new[name]
        elif name not in dropped:
            merged[name] = value
    for name, value in new.items():
        merged.setdefault(name, value)
    return merged


def fixed_rules(lm, task, cfg: StudyConfig, out: Path, evaluation: Evaluation, problems, *,
                progress: bool = False, on_chunk=None, engine=None) -> Evaluation:
    """The rules stage: the two sample tables in ``out`` (:func:`rule_tables`; ``problems`` must be
    the evaluation's), every rule tuned on validation and scored on the evaluated problems, written
    to ``out/curves.json``; returns ``evaluation`` with every rule's points added."""
    ids = [p.get("id") if isinstance(p, dict) else p for p in evaluation.details.get("problems", [])]
    if ids and ids != [p.id for p in problems]:
        raise ValueError("the rules' evaluation table must hold the evaluated problems, in their order")
    validation, test = rule_tables(lm, task, cfg, out, problems, progress=progress, on_chunk=on_chunk, engine=engine)
    tables = {"validation": str(Path(out) / "validation"), "test": str(Path(out) / "test")}
    entries, curves = rule_entries(validation, test, cfg.rules.rules, tables)
    write_json(Path(out) / "curves.json", {"validation_problems": validation.shape[0], "test_problems": test.shape[0],
                                           "samples": cfg.rules.samples, "arms": validation.arm_names,
                                           "tables": tables, "rules": curves})
    return add_rule_entries(evaluation, entries)


# ---- the learned attempt policy ---------------------------------------------------------------------


def attempt_entries(scored: Sequence, test: SampleTable, tables: dict, sources: Sequence[str],
                    label: str = "Attempt policy") -> dict:
    """One eval_details method per price (``evaluation.attempt.Scored`` of every training seed at that
    price, in seed order), named ``"<label> (price p)"``, of family ``learned``, in the rules'
    entries' shape: ``per_problem[...]["answer_accuracy"]`` is ``[problem][training seed]`` and
    ``compute[...]["decodes"]["answer"]`` the mean over seeds per problem, with each seed's own
    decodes and tokens per problem under ``"by_seed"`` (``[problem][seed]``): a seed's policy spends
    its own compute, so a verdict at a compute level reads each seed's curve (``reporting.rules``)."""
    by_price: dict[float, list] = {}
    for s, source in zip(scored, sources):
        by_price.setdefault(s.price, []).append((s, source))
    entries = {}
    for price, runs in by_price.items():
        correct = np.stack([s.outcome.correct.astype(float) for s, _ in runs], axis=1)  # [problem, seed]
        decodes = np.stack([s.outcome.attempts.astype(float) for s, _ in runs], axis=1)
        tokens = np.stack([s.outcome.tokens.astype(float) for s, _ in runs], axis=1)
        first = runs[0][0]
        name = f"{label} (price {price:g})"
        entries[name] = {
            "method": {"kind": "attempt", "role": "attempt policy", "level": "sequence", "family": "learned",
                       "curve": label, "price": price, "features": list(first.features),
                       "parts": list(first.parts),
                       "per_seed": [{**s.record(), "source": source} for s, source in runs],
                       "seed_agreement": seed_agreement([s.outcome for s, _ in runs]),
                       "validation": {"accuracy": float(np.mean([s.val_accuracy for s, _ in runs])),
                                      "decodes": float(np.mean([s.val_decodes for s, _ in runs]))},
                       "answer_rule": "its learned weighting of its attempts' answers",
                       "actions": [a.name for a in test.actions], "stop_at_answer": test.header.get("stop_at_answer"),
                       "seeds": "one sample table (seed 0); one policy per training seed, one column each",
                       "source": ", ".join(source for _, source in runs), RULE_TABLE_KEY: tables,
                       "decodes_per_problem": {"answer": float(decodes.mean())},
                       "tokens_per_problem": {"answer": float(tokens.mean())}},
            "per_problem": {"answer_accuracy": correct.tolist()},
            "compute": {"decodes": {"answer": decodes.mean(axis=1).tolist(), "by_seed": decodes.tolist()},
                        "tokens": {"answer": tokens.mean(axis=1).tolist(), "by_seed": tokens.tolist()}},
        }
    return entries


def attempt_stage(lm, task, cfg: StudyConfig, out: Path, rules_out: Path, evaluation: Evaluation, problems, *,
                  progress: bool = False, on_chunk=None, verifier_dir: Path | None = None,
                  engine=None) -> Evaluation:
    """The attempt-policy stage: the fixed rules' two tables (read back from ``rules_out``), a table
    of ``cfg.attempt.train_problems`` training problems in ``out/train`` (:func:`study_table`), one
    policy per price and training seed (the study's ``seeds`` from ``attempt.seed``) trained there
    (resumable, in ``out/price-<p>-seed-<s>``), kept-best on validation and
    scored on the evaluated problems; written to ``out/curve.json``; returns ``evaluation`` with one
    ``learned`` entry per price added. A training table too thin to learn from is warned about once
    (``evaluation.attempt.thin_table_warning``), the warning kept in ``curve.json``. With
    ``verifier_dir`` (the verifier stage's verifier) the strongest rule each policy is set against
    there is chosen among the verifier rules too.
    With two or more sampled arms, also the same policy restricted to its best single sampled arm
    (``evaluation.decoder_choice``): the ablation in ``curve.json``'s ``ablations`` and one ``"Attempt
    policy, best single arm (price p)"`` entry per price (its ``parts``: verifier, stop; the full
    policy's: verifier, stop, decoder)."""
    ac = cfg.attempt
    validation, test = rule_tables(lm, task, cfg, rules_out, problems, progress=progress, on_chunk=on_chunk,
                                   engine=engine)
    train = study_table(lm, task, cfg, Path(out) / "train", "train", task.load("train")[: ac.train_problems],
                        progress=progress, on_chunk=on_chunk, engine=engine)
    if verifier_dir is not None:
        verifier = load_verifier(verifier_dir)[0]
        scores = (table_scores(verifier, validation), table_scores(verifier, test))
        baselines = rule_baselines(validation, test, cfg.rules.rules + cfg.verifier.rules, scores)
    else:
        baselines = rule_baselines(validation, test, cfg.rules.rules)
    warning = thin_table_warning(train, baselines, "more --attempt.train-problems or --rules.samples give it more")
    if warning:
        log.warning(warning)
    config = AttemptTrainConfig(features=tuple(ac.features), steps=ac.steps, val_every=max(1, min(25, ac.steps)))
    scored, sources = [], []
    for price in ac.prices:
        for seed in range(ac.seed, ac.seed + cfg.seeds):  # one policy per training seed, as every adapter
            where = Path(out) / f"price-{price:g}-seed-{seed}"
            resume = (where / "train_log.jsonl").is_file()  # a killed (or finished) run continues from its checkpoint
            scored.append(train_and_score(train, validation, test, replace(config, price=price, seed=seed),
                                          baselines, where, resume=resume, task=task.name))
            sources.append(str(where))
    tables = {"train": str(Path(out) / "train"), "validation": str(Path(rules_out) / "validation"),
              "test": str(Path(rules_out) / "test")}
    entries = attempt_entries(scored, test, tables, sources)
    ablations = []
    if sum(not a.is_greedy for a in train.actions) >= 2:  # the value of choosing the decoder: the best single arm
        runs = single_arm_runs(train, validation, test, config, scored, baselines, Path(out) / "single-arm")
        ablations.append(decoder_ablation(train, validation, test, config, scored, baselines, runs))
        best = [s for run in runs.values() for s in run.by_arm[run.best]]  # seed by seed, as ``scored``
        where = [str(single_arm_dir(Path(out) / "single-arm", train.arm_names.index(run.best), s.price, s.seed))
                 for run in runs.values() for s in run.by_arm[run.best]]
        entries.update(attempt_entries(best, test, tables, where, "Attempt policy, best single arm"))
    write_json(Path(out) / "curve.json", {"train_problems": train.shape[0], "tables": tables,
                                          "policies": [s.record() for s in scored], "ablations": ablations,
                                          **({"warning": warning} if warning else {})})
    return add_rule_entries(evaluation, entries, family="learned")


# ---- the learned verifier and the rules that read it ----------------------------------------------------


def problem_families(problems) -> list[str]:
    """Each problem's family (``meta["family"]``; "" where the task has none)."""
    return [str((getattr(p, "meta", None) or {}).get("family", "")) for p in problems]


def verifier_stage(lm, task, cfg: StudyConfig, out: Path, rules_out: Path, evaluation: Evaluation, problems, *,
                   train_table: Path | None = None, progress: bool = False, on_chunk=None,
                   engine=None) -> Evaluation:
    """The verifier stage: the fixed rules' two tables (read back from ``rules_out``), a table of
    ``cfg.verifier.train_problems`` training problems in ``train_table`` (default ``out/train``;
    :func:`study_table`), a verifier trained there into ``out/verifier`` (read back when there), its
    ranking quality per family (cross-fitted on the training table; on validation and on the
    evaluated problems) and every verifier rule tuned on validation and scored on the evaluated
    problems, written to ``out/verifier_rules.json``; returns ``evaluation`` with their points added
    (family ``fixed rule``, ``"reads_verifier": true``)."""
    vc = cfg.verifier
    validation, test = rule_tables(lm, task, cfg, rules_out, problems, progress=progress, on_chunk=on_chunk,
                                   engine=engine)
    train_path = Path(train_table or Path(out) / "train")
    train_problems = task.load("train")[: vc.train_problems]
    train = study_table(lm, task, cfg, train_path, "train", train_problems, progress=progress, on_chunk=on_chunk,
                        engine=engine)
    where = Path(out) / "verifier"
    config = VerifierTrainConfig()
    verifier = load_verifier(where)[0] if (where / "verifier.json").is_file() else fit_on_table(train, config, where)
    scores = (table_scores(verifier, validation), table_scores(verifier, test))
    validation_problems = task.load("validation")[: cfg.rules.problems]
    quality = {"train (cross-fitted)": ranking_quality(crossfit_table_scores(train, config), train,
                                                       problem_families(train_problems)),
               "validation": ranking_quality(scores[0], validation, problem_families(validation_problems)),
               "evaluated": ranking_quality(scores[1], test, problem_families(problems))}
    tables = {"train": str(train_path), "validation": str(Path(rules_out) / "validation"),
              "test": str(Path(rules_out) / "test"), "verifier": str(where)}
    entries, curves = rule_entries(validation, test, vc.rules, tables, verifier=scores)
    write_json(Path(out) / "verifier_rules.json", {"tables": tables, "quality": quality, "rules": curves})
    verified = add_rule_entries(evaluation, entries, verifier=True)
    verified.details["verifier_quality"] = quality  # the report's per-family lines
    return verified
