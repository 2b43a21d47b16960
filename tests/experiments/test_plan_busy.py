"""The demo's plan on a busy machine: the median of several probes, the machine's own speed with the
load taken out (what the sizes are fitted to), a time range and advice, and a run that re-plans its
later stages from the real minutes of the finished ones."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import torch

from decoding_adapters.experiments import planning, presets
from decoding_adapters.experiments import probe as probing
from decoding_adapters.experiments.planning import fit_to_minutes, plan_advice, plan_range
from decoding_adapters.experiments.probe import DecodeProbe


class _Clock:
    """The part of ``pipeline.StageClock`` that ``replan`` reads."""

    def __init__(self, plan, minutes):
        self.plan, self._minutes = plan, minutes

    def total_minutes(self):
        return dict(self._minutes)


def test_the_probe_is_a_median_and_its_capacity_leaves_out_the_load(monkeypatch):
    # many threads stall beside another busy process, one thread barely notices it
    speeds = itertools.cycle([60.0, 150.0, 400.0, 150.0, 55.0, 150.0])  # multi, single, multi, single, ...
    monkeypatch.setattr(probing, "probe_tokens_per_second", lambda lm, task: next(speeds))
    monkeypatch.setattr(probing, "_load", lambda: 1.9)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    probe = probing.measure_probe(object(), None, repeats=3, spread_s=0.0)
    assert probe.samples == (60.0, 400.0, 55.0) and probe.tokens_per_second == 60.0  # one burst moves nothing
    gain = probing.REFERENCE_PROBE_TOKENS_PER_SECOND / probing.REFERENCE_SINGLE_THREAD_TOKENS_PER_SECOND
    assert probe.capacity == 150.0 * gain and probe.busy and probe.load == 1.9
    text = probe.describe()
    assert "median of 60, 400, 55" in text and "load 1.9" in text and "unloaded" in text
    assert DecodeProbe.from_record(json.loads(json.dumps(probe.record()))) == probe
    assert DecodeProbe.from_record({"tokens_per_second": 90.0}).capacity == 90.0  # a probe file from before


def test_plans_beside_a_busy_process_keep_the_quiet_sizes_and_say_the_range():
    quiet = DecodeProbe(440.0, 440.0, (440.0,) * 3, load=0.1)
    busy = DecodeProbe(120.0, 440.0, (120.0,) * 3, load=1.8)  # the one-thread probe saw the quiet speed
    quiet_fit = fit_to_minutes(presets.SIZES["default"], quiet.capacity, 15)[0]
    busy_fit = fit_to_minutes(presets.SIZES["default"], busy.capacity, 15)[0]
    assert busy_fit.eval_problems == quiet_fit.eval_problems and busy_fit.token.steps == quiet_fit.token.steps
    low, high = plan_range(busy_fit, busy)
    assert high > 2 * low
    advice = plan_advice(presets.SIZES["default"], busy_fit, 15, busy)
    assert "busy" in advice and "re-plans" in advice and f"{high:.0f} min" in advice
    assert plan_advice(presets.SIZES["default"], quiet_fit, 15, quiet) == ""


def test_a_fit_that_cannot_reach_the_minutes_says_what_to_do():
    slow = DecodeProbe(4.0, 4.0, (4.0,), load=0.0)
    fitted = fit_to_minutes(presets.SIZES["default"], slow.capacity, 15)[0]
    advice = plan_advice(presets.SIZES["default"], fitted, 15, slow)
    assert "--minutes" in advice and "--size tiny" in advice and "faster machine" in advice


def test_the_run_replans_its_later_stages_from_the_finished_ones(tmp_path):
    cfg = presets.SIZES["default"]
    plan = planning.estimate_minutes(cfg, 440.0)
    done = {k: 3 * plan[k] for k in ("load", "select", "sequence", "draft") if k in plan}  # three times slower
    clock = _Clock(dict(plan), done)
    fitted, note = planning.replan(cfg, clock, 15.0, 440.0, tmp_path / "replan.json", ("token", "evaluate"))
    assert fitted.token.steps < cfg.token.steps and "Re-planned before the token stage" in note
    assert "3.0 x their plan" in note
    # a resume reads the decision back, whatever the clock says now
    again, _ = planning.replan(cfg, _Clock(dict(plan), {}), 15.0, 440.0, tmp_path / "replan.json",
                               ("token", "evaluate"))
    assert again.token.steps == fitted.token.steps and again.eval_problems == fitted.eval_problems
    on_time = {k: plan[k] for k in done}
    same, quiet_note = planning.replan(cfg, _Clock(dict(plan), on_time), 15.0, 440.0, tmp_path / "other.json",
                                   ("token", "evaluate"))
    assert same == replace(cfg) and quiet_note == ""
