"""The demo and the reproduce study: a script over the pipeline's stages (``experiments.pipeline``),
run in this order by :func:`run_demo`.

Stages (each resumable: run the same command again after a kill and finished work is reused):

0. ``budget/`` (when ``budget.candidates`` is set): greedy on validation problems at each
   candidate token budget; the smallest budget whose truncated fraction is <= ``max_truncated``
   becomes the token budget of every later stage (chosen on validation, never test).
1. ``actions/``: evaluate a pool of candidate actions on validation problems and pick K by greedy
   coverage; the same table gives the best single *token* action.
2. ``seq-*/``: sequence adapters w/ and w/o budget, trained by **offline replay** of the stage-1
   outcome table (``sequence_rewards="replay"``: B <= samples stored) or with **live rollouts**
   (``sequence_rewards="live"``: B completions decoded per bandit round).
2b. ``draft-*/`` (when ``draft_stage``): draft-gated adapters trained on both-arms tables.
3. ``tok-*/``: token adapters w/ budget, w/o budget and entropy-only, trained with live rollouts
   on filtered training prompts, with early stopping on validation reward when
   ``token.patience`` > 0.
4. ``eval/``: Greedy, Best, Mixed, the token-level baselines and every adapter on the test split,
   same problems and seeds.
4b. ``rules/`` (when ``rules.enabled``): sample tables of validation problems and of the evaluated
   problems (the stopped greedy and N samples per sampled arm), every fixed rule tuned on validation
   per compute level and scored on the evaluated problems; its points join ``eval/eval_details.json``.
4c. ``attempt/`` (when ``rules.enabled`` and ``attempt.enabled``): the attempt policy, trained on a
   sample table of training problems, one policy per price; its points join the evaluation too.
5. ``report/``: report.md (with the truncation, training-curve, target and cost sections),
   results.json, figures.

The sizes live in ``presets``, the time plan in ``planning`` (scaled by the decode probe in
``probe``), the study's own report sections in ``report_sections``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..core.files import write_json
from ..decoding.actions import PRESETS, DecodingAction, load_action_set
from ..decoding.ray_rollouts import TaskSpec
from ..decoding.table_engines import TableBackend
from ..evaluation import (
    Evaluation,
    Method,
    best_token_action_method,
    format_table,
    greedy_method,
    greedy_to_budget_method,
    mixed_method,
    sequence_mixture_of_token_actions,
    token_mixed_method,
)
from ..lm.models import DEFAULT_DEVICE, ModelSpec, load_frozen_lm
from ..reporting.families import family_section
from ..reporting.parts import parts_section
from ..reporting.report import (
    evidence_lines,
    headroom_section,
    nothing_solved,
    selection_section,
    training_curve_section,
    truncation_section,
    write_report,
)
from ..reporting.rules import rules_section
from ..selection.best import best_static_from_table
from . import pipeline, stages_rules
from .planning import estimate_minutes, fit_note, fit_to_minutes, plan_advice, plan_range, replan
from .presets import ADAPTER_NAMES, DRAFT_TRAINING, TINY, TINY_NOTE, TOKEN_MIXED, TOKEN_VARIANTS, pool_size
from .probe import probe_once
from .report_sections import cost_section, target_lines, token_data_section
from .study_config import StudyConfig, study_task_options

__all__ = ["run_demo", "check_same_run", "OPTIONS_FILE"]


OPTIONS_FILE = "demo_options.json"
"""What a study run in a folder was asked for (model, minutes, every size): a later run into the same
folder must ask for the same, or its report would mix runs."""


def check_same_run(out: Path, requested: dict) -> None:
    """Record ``requested`` in ``out``, or refuse when ``out`` holds a run started with other options."""
    path = out / OPTIONS_FILE
    if path.is_file():
        before = json.loads(path.read_text())
        # a setting the record predates (a stage added since the run started, e.g. the fixed rules)
        # is not a change: the resumed run adds that stage's work to the finished ones
        known = _flat(before)
        changed = sorted({(k, v) for k, v in _flat(requested).items() if k in known} ^ known.items())
        if changed:
            names = sorted({name for name, _ in changed})
            old, new = _flat(before), _flat(requested)
            raise ValueError(
                f"{out} holds a run started with other options ("
                + "; ".join(f"{n}: {old.get(n)} -> {new.get(n)}" for n in names[:6])
                + "): re-run it with the options it was started with, or choose another --out"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_json(path, requested)


def _flat(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value)
    return flat


@dataclass
class _Run:
    """What the stages of one study run share: where it writes, the frozen LM and task, its clock,
    the machine's decode speed its sizes are fitted to, and where its sample tables are decoded."""

    out: Path
    lm: object
    task: object
    task_spec: TaskSpec
    """How a table worker rebuilds ``task``."""
    tables: TableBackend
    clock: pipeline.StageClock
    model: str
    command: str
    progress: bool
    minutes: float | None
    speed: float
    note: str = ""
    """What the time fit and the re-plans cut, for the report ('' when nothing)."""
    size_note: str = ""
    """What the chosen size cut from the uncut study, for the report's Cost section ('' when nothing)."""

    def fit(self, cfg: StudyConfig) -> StudyConfig:
        return fit_to_minutes(cfg, self.speed, self.minutes)[0] if self.minutes else cfg

    def record(self, cfg: StudyConfig) -> None:
        """The config the run goes on with, as ``study_config.json``."""
        write_json(self.out / "study_config.json",
                   {"model": self.model, "command": self.command, "fit": self.note, **asdict(cfg)})

    def replan(self, cfg: StudyConfig, stages: tuple[str, ...]) -> StudyConfig:
        """With ``minutes``, the sizes of ``stages`` re-planned from the real minutes of the finished ones."""
        if not self.minutes:
            return cfg
        cfg, replanned = replan(cfg, self.clock, self.minutes, self.speed, self.out / "replan.json", stages)
        self.note = " ".join(x for x in (self.note, replanned) if x)
        self.record(cfg)
        return cfg


def _start(out: Path, cfg: StudyConfig, *, model: str, progress: bool, label: str, command: str,
           minutes: float | None, device: str, tables: TableBackend) -> _Run:
    """Load the LM, probe this machine and print the plan (the ``load`` stage)."""
    clock = pipeline.StageClock(label, out / "stage_minutes.json")  # the plan needs the probe: after loading
    clock.begin("load", "loading the frozen LM", model)
    lm = load_frozen_lm(ModelSpec(name_or_path=model, device=device))
    task_spec = TaskSpec("arithmetic", study_task_options(cfg))
    task = task_spec.build()
    probe = probe_once(lm, cfg, out / "decode_probe.json")  # the plan, scaled to this machine
    # the sizes are fitted to the machine's capacity; a busy spell is met by re-planning later
    run = _Run(out, lm, task, task_spec, tables, clock, model, command, progress, minutes, probe.capacity)
    fitted = run.fit(cfg)
    clock.plan = estimate_minutes(fitted, run.speed)
    low, high = plan_range(fitted, probe)
    span = f"{low:.0f}" if high < low * 1.1 else f"{low:.0f}-{high:.0f}"
    print(f"{probe.describe()}; plan {span} min", flush=True)
    advice = plan_advice(cfg, fitted, minutes, probe)
    if advice:
        print(f"note: {advice}", flush=True)
    clock.end()
    return run


def _choose_budget(run: _Run, cfg: StudyConfig) -> tuple[StudyConfig, dict | None]:
    """The token budget chosen on validation (when there are candidates), then the sizes fitted at it."""
    budget_record = None
    if cfg.budget.candidates:
        run.clock.begin("budget", "token budget from greedy truncation on validation",
                        f"budgets {','.join(map(str, cfg.budget.candidates))} x {cfg.budget.problems} problems")
        cfg, budget_record = pipeline.choose_budget(run.lm, run.task, cfg, run.out / "budget")
        print(f"token budget: {cfg.token_budget}", flush=True)
        run.clock.end()
    fitted = run.fit(cfg)  # at the chosen budget
    run.note = fit_note(cfg, fitted, run.minutes, run.speed) if run.minutes else ""
    if run.note:
        print(run.note, flush=True)
    # the stages still to run
    run.clock.plan = {**estimate_minutes(fitted, run.speed), **{k: run.clock.plan[k] for k in run.clock.minutes}}
    run.record(fitted)
    return fitted, budget_record


def _choice_table(cfg: StudyConfig, actions_dir: Path) -> Path:
    """The outcome table Best and the best token action are chosen on: the selection's own, or, where
    they are chosen on more problems (``selection.best_problems``), a table of its own (a table holds
    one problem set)."""
    more = cfg.selection.choice_problems > cfg.selection.problems
    return actions_dir / ("best_outcomes.jsonl" if more else "outcomes.jsonl")


def _best_token_action(lm, task, cfg: StudyConfig, out: Path, progress: bool) -> DecodingAction:
    """The token-level action set's best single action on the validation problems Best is chosen on
    (cells already in that table are reused; missing ones are decoded into it)."""
    actions = list(PRESETS["math-token"])
    problems = task.load("validation")[: cfg.selection.choice_problems]
    label = "token actions (best single one)" if progress else False
    table = pipeline.decode_candidates(lm, task, problems, actions, cfg, _choice_table(cfg, out), label)
    best = best_static_from_table(table, (1,), [a.name for a in actions])  # ties: the first (greedy, in math-token)
    return actions[best.choice[0]]


def _token_baselines(actions: list[DecodingAction], best: DecodingAction) -> list[Method]:
    """The token-level static baselines: the token action set mixed uniformly per token (the
    paper's token-level Mixed), mixed once per sample (its own row), and its best single action
    (chosen on validation)."""
    return [
        token_mixed_method(actions, TOKEN_MIXED),
        sequence_mixture_of_token_actions(actions),
        best_token_action_method(best),
    ]


def _select(run: _Run, cfg: StudyConfig) -> tuple[StudyConfig, list[Method]]:
    """The action selection (``actions/``) and the best static token action, which every token run
    starts from (the returned config's ``token.prior_action``); also the token-level baselines."""
    sel = cfg.selection
    run.clock.begin("select", "action selection", f"{pool_size(cfg)} candidates x {sel.choice_problems} problems x "
                                                  f"{sel.samples} samples")
    pool, problems = pipeline.candidate_pool(cfg), run.task.load("validation")[: sel.problems]
    actions_dir = run.out / "actions"
    outcomes = actions_dir / "outcomes.jsonl"
    table = pipeline.decode_candidates(run.lm, run.task, problems, pool, cfg, outcomes, run.progress)
    # Best's finalists on the larger set of validation problems where the study asks for one
    best_table = pipeline.decode_best_finalists(run.lm, run.task, cfg, table, pool, _choice_table(cfg, actions_dir),
                                                run.progress)
    meta = pipeline.selection_meta(cfg, run.task.name, len(problems), pool)
    print(pipeline.write_selection(actions_dir, pool, table, sel.k, meta, cfg.eval.k_values, best_table))
    token_actions = list(PRESETS["math-token"])
    best_token = _best_token_action(run.lm, run.task, cfg, actions_dir, run.progress)
    # every token run starts at the prior on the best static token action: the recorded config says so
    cfg = replace(cfg, token=replace(cfg.token, prior_action=token_actions.index(best_token)))
    run.record(cfg)
    run.clock.end()
    return cfg, _token_baselines(token_actions, best_token)


def _train_sequence(run: _Run, cfg: StudyConfig) -> None:
    """The sequence adapters w/ and w/o budget, every seed (``seq-*/``)."""
    actions_path, table_path = run.out / "actions" / "actions.json", run.out / "actions" / "outcomes.jsonl"
    run.clock.begin(
        "sequence",
        f"sequence adapters ({'live rollouts' if cfg.sequence_rewards == 'live' else 'offline replay'})",
        f"w/ and w/o budget x {cfg.seeds} seeds x {cfg.sequence.steps} steps, "
        f"B in {set(cfg.sequence.parallel_budgets)}",
    )
    for seed in range(cfg.seeds):
        for use_budget, tag in ((True, "budget"), (False, "nobudget")):
            pipeline.train_sequence(run.lm, run.task, cfg, actions_path, table_path, run.out / f"seq-{tag}-s{seed}",
                                    seed, use_budget)
    run.clock.end()


def _train_draft(run: _Run, cfg: StudyConfig) -> None:
    """The draft-gated adapters, every seed (``draft-*/``), when the study has the stage."""
    if not cfg.draft_stage:
        return
    run.clock.begin("draft", "draft-gated adapters", f"both-arms tables ({cfg.draft_samples} re-decodes per problem), "
                                                     f"{cfg.seeds} seeds, features {cfg.draft_features}")
    for seed in range(cfg.seeds):
        pipeline.train_draft(run.lm, run.task, cfg, run.out / "actions" / "actions.json", run.out / f"draft-s{seed}",
                             seed, features=cfg.draft_features, **DRAFT_TRAINING)
    run.clock.end()


def _train_token(run: _Run, cfg: StudyConfig) -> None:
    """The token adapters, every variant and seed (``tok-*/``), on the filtered training prompts."""
    stop = f", early stop after {cfg.token.patience} flat validations" if cfg.token.patience else ""
    run.clock.begin("token", "token adapters",
                    f"{len(TOKEN_VARIANTS)} variants x {cfg.seeds} seeds x <= {cfg.token.steps} steps{stop}")
    prior = cfg.token.prior_action
    problems = pipeline.filtered_prompts(run.lm, run.task, cfg, run.out, run.progress, prior_action=prior)
    for seed in range(cfg.seeds):
        for tag, (use_budget, features) in TOKEN_VARIANTS.items():
            pipeline.train_token(run.lm, run.task, cfg, run.out / f"tok-{tag}-s{seed}", seed, use_budget=use_budget,
                                 features=features, problems=problems, progress=run.progress, prior_action=prior)
    run.clock.end()


def _evaluate(run: _Run, cfg: StudyConfig, token_baselines: list[Method]) -> tuple[Evaluation, list]:
    """Every baseline and adapter on the test problems (``eval/``); the evaluation and those problems."""
    out, lm = run.out, run.lm
    actions_path = out / "actions" / "actions.json"
    run.clock.begin("evaluate", "evaluation", f"{cfg.eval_problems} test problems x {cfg.seeds} seeds, "
                                              f"pass@{','.join(map(str, cfg.eval.k_values))}")
    methods = [greedy_method(), *([greedy_to_budget_method()] if cfg.stop_at_answer else []),
               pipeline.best_method(actions_path, cfg.eval.k_values),
               mixed_method(load_action_set(actions_path), "Mixed"),
               *token_baselines]
    methods += [pipeline.adapter_runs(out, prefix, cfg, lm, name) for prefix, name in ADAPTER_NAMES.items()]
    if cfg.draft_stage:  # the draft-gated adapter and its controls at the same compute
        methods += [pipeline.adapter_runs(out, "draft", cfg, lm, "Draft-gated"),
                    *pipeline.draft_controls(lm, run.task, cfg, actions_path, out / "draft-s0", out)]
    test_problems = run.task.load(cfg.eval_split)[: cfg.eval_problems]
    evaluation = pipeline.evaluate_methods(lm, run.task, test_problems, methods, cfg, out / "eval",
                                           meta={"model": run.model, "task": run.task.name}, progress=run.progress)
    run.clock.end()
    return evaluation, test_problems


def _join(evaluation: Evaluation, joined: Evaluation, out: Path) -> Evaluation:
    """``joined`` (the evaluation with a later stage's points) written to ``out/eval`` unless it is
    already there (a resumed run's are)."""
    if json.dumps(joined.details) != json.dumps(evaluation.details):
        joined.write(out / "eval")
    return joined


def _rules_and_attempt(run: _Run, cfg: StudyConfig, evaluation: Evaluation, test_problems: list) -> Evaluation:
    """The fixed rules (``rules/``), the verifier and the rules that read it (``verifier/``) and the
    attempt policy (``attempt/``), where the study has them, scored on the evaluated problems and
    joined to the evaluation; their sample tables decoded where ``run.tables`` says."""
    if not cfg.rules.enabled:
        return evaluation
    cfg = cfg.with_selected_decoders(run.out / "actions" / "actions.json")
    engine = run.tables.open(run.lm, run.task, run.task_spec)
    try:
        return _table_stages(run, cfg, evaluation, test_problems, engine)
    finally:
        engine.close()


def _table_stages(run: _Run, cfg: StudyConfig, evaluation: Evaluation, test_problems: list, engine) -> Evaluation:
    """:func:`_rules_and_attempt`'s stages, every sample table decoded by ``engine``."""
    rc, vc, ac, out = cfg.rules, cfg.verifier, cfg.attempt, run.out
    sampled = f"at T={rc.temperatures}" if rc.decoders is None else f"of {', '.join(a.name for a in rc.arms[1:])}"
    run.clock.begin("rules", "fixed rules", f"sample tables of {rc.problems} validation and {len(test_problems)} "
                                            f"test problems, greedy + {rc.samples} samples {sampled}")
    ruled = stages_rules.fixed_rules(run.lm, run.task, cfg, out / "rules", evaluation, test_problems,
                                     progress=run.progress, engine=engine)
    evaluation = _join(evaluation, ruled, out)
    run.clock.end()
    if vc.enabled:  # trained on the attempt stage's training table (decoded here first)
        run.clock.begin("verifier", "verifier and the rules that read it", f"{vc.train_problems} training problems")
        verified = stages_rules.verifier_stage(run.lm, run.task, cfg, out / "verifier", out / "rules", evaluation,
                                               test_problems, train_table=out / "attempt" / "train",
                                               progress=run.progress, engine=engine)
        evaluation = _join(evaluation, verified, out)
        run.clock.end()
    if not ac.enabled:
        return evaluation
    run.clock.begin("attempt", "attempt policy", f"a sample table of {ac.train_problems} training problems, one "
                                                 f"policy per price {list(ac.prices)}")
    learned = stages_rules.attempt_stage(run.lm, run.task, cfg, out / "attempt", out / "rules", evaluation,
                                         test_problems, progress=run.progress, engine=engine,
                                         verifier_dir=out / "verifier" / "verifier" if vc.enabled else None)
    evaluation = _join(evaluation, learned, out)
    run.clock.end()
    return evaluation


def _report(run: _Run, cfg: StudyConfig, evaluation: Evaluation, budget_record: dict | None) -> Path:
    """``report/``: report.md with the study's sections, results.json and figures."""
    out = run.out
    run.clock.begin("report", "report")
    actions_path = out / "actions" / "actions.json"
    logs = {name: out / f"{prefix}-s0" / "train_log.jsonl" for prefix, name in ADAPTER_NAMES.items()}
    curves = {name: [out / f"{prefix}-s{s}" / "train_log.jsonl" for s in range(cfg.seeds)]
              for prefix, name in ADAPTER_NAMES.items()}
    truncation = ""
    if budget_record:
        truncation = truncation_section(budget_record["stats"], budget_record["chosen"],
                                        budget_record["max_truncated"])
    sections = [
        ("Action selection", selection_section(actions_path, out / "report")),
        ("Token budget and truncation", truncation),
        ("Token training data", token_data_section(out / "token-prompts.json", cfg)),
        ("Training curves (every seed)", training_curve_section(out / "report", curves)),
        ("Fixed rules", rules_section(evaluation.results, evaluation.details, out / "report")),
        ("What each part adds", parts_section(evaluation.details)),
        ("By family", family_section(evaluation.details)),
        ("Head-room captured", headroom_section(actions_path, evaluation.results,
                                                evaluation.details, list(ADAPTER_NAMES.values()))),
        ("Targets", "\n".join(target_lines(evaluation.results, evaluation.details))),
        ("Cost", cost_section(run.clock, out, cfg, " ".join(x for x in (run.size_note, run.note) if x))),
    ]
    report_path = write_report(out / "report", evaluation.results, evaluation.details, logs, sections=sections)
    run.clock.end()
    return report_path


def _print_summary(run: _Run, cfg: StudyConfig, evaluation: Evaluation, report_path: Path, label: str) -> None:
    """The evidence lines (or, at tiny sizes with nothing solved, why), the table and the time spent."""
    lines = evidence_lines(evaluation.results, evaluation.details)
    if nothing_solved(evaluation.results) and cfg.token_budget <= TINY.token_budget:
        lines = [TINY_NOTE.format(problems=cfg.eval_problems, budget=cfg.token_budget)]
    for line in lines:
        print(line.replace("**", ""))
    print(format_table(evaluation.results))
    clock = run.clock
    runs, total = clock.runs(), sum(clock.total_minutes().values())
    spent = f"{clock.elapsed():.1f} min"
    if runs > 1:
        spent += f" (this run; {total:.1f} min over {runs} runs into {run.out})"
    print(f"\n{label} finished in {spent}; report: {report_path}")


def run_demo(out: str | Path, cfg: StudyConfig, *, model: str = "smollm2", progress: bool = True,
             label: str = "demo", command: str = "", minutes: float | None = None,
             device: str = DEFAULT_DEVICE, tables: TableBackend | None = None, size_note: str = "") -> dict:
    """Run every stage into ``out`` and return the evaluation results. With ``minutes``, the sizes
    are cut by ``fit_to_minutes`` when this machine's plan is longer (the report says so, as it
    says ``size_note``: what the size itself cut). ``tables``: where the sample tables are decoded
    (None: in this process; the tables are the same wherever)."""
    out = Path(out)
    check_same_run(out, {"model": model, "minutes": minutes, "study": asdict(cfg)})
    run = _start(out, cfg, model=model, progress=progress, label=label, command=command, minutes=minutes,
                 device=device, tables=tables or TableBackend())
    run.size_note = size_note
    cfg, budget_record = _choose_budget(run, cfg)
    cfg, token_baselines = _select(run, cfg)
    _train_sequence(run, cfg)
    _train_draft(run, cfg)
    cfg = run.replan(cfg, ("token", "evaluate"))
    _train_token(run, cfg)
    cfg = run.replan(cfg, ("evaluate",))
    evaluation, test_problems = _evaluate(run, cfg, token_baselines)
    evaluation = _rules_and_attempt(run, cfg, evaluation, test_problems)
    report_path = _report(run, cfg, evaluation, budget_record)
    _print_summary(run, cfg, evaluation, report_path, label)
    return evaluation.results
