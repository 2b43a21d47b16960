"""The decode probe: how fast this machine decodes the study's requests now and unloaded, measured
in a few seconds at a run's first start (and by ``--plan``); ``planning`` scales its plan by it."""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.files import write_json
from ..decoding.actions import ActionSet, DecodingAction
from ..decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
from ..tasks import get_task
from .study_config import StudyConfig, study_task_options

__all__ = ["PROBE_ROWS", "PROBE_TOKENS", "REFERENCE_PROBE_TOKENS_PER_SECOND",
           "REFERENCE_SINGLE_THREAD_TOKENS_PER_SECOND", "DecodeProbe", "probe_tokens_per_second", "measure_probe",
           "decode_probe", "probe_once"]


PROBE_ROWS, PROBE_TOKENS = 32, 16
"""The throughput probe: this many sampled (T = 1) rows of validation prompts, this many tokens."""
REFERENCE_PROBE_TOKENS_PER_SECOND = 440.0
"""What :func:`probe_tokens_per_second` measured on the machine the constants above were fitted on
(the project's 2-core AMD EPYC with AVX512-BF16, bf16, idle: 402 / 447 / 440 / 441 / 542 in five
probes, median 440)."""


def probe_tokens_per_second(lm, task) -> float:
    """Decoded tokens per second of ``lm`` on this machine: ``PROBE_ROWS`` rows at T = 1 for
    ``PROBE_TOKENS`` tokens, after a small warm-up (first calls allocate caches and pick kernels).
    A few seconds; divided by ``REFERENCE_PROBE_TOKENS_PER_SECOND`` it scales the plan to the CPU
    it runs on (an AVX2-only CPU runs fp32, several times slower than the reference)."""
    problems = task.load("validation")[: PROBE_ROWS // 2]
    prompts, _ = encode_problems(lm, task, problems)
    rollouts = HFRollouts(lm, ActionSet([DecodingAction(temperature=1.0)]), batch_rows=PROBE_ROWS)

    def request(rows: int, tokens: int) -> RolloutRequest:
        return RolloutRequest(prompts=prompts, prompt_of_row=[r % len(prompts) for r in range(rows)],
                              row_seeds=list(range(rows)), token_budget=tokens, row_actions=[0] * rows)

    rollouts.run(request(4, 4))  # the first call allocates caches and picks kernels
    start = time.perf_counter()
    warm = rollouts.run(request(4, 4))
    warm_rate = float(warm.lengths.sum()) / max(time.perf_counter() - start, 1e-6)
    rows, tokens = PROBE_ROWS, PROBE_TOKENS
    if rows * tokens / max(warm_rate, 1e-6) > PROBE_MAX_S / 2:  # a machine so busy that the probe would take
        rows, tokens = 8, 8  # minutes: a smaller one (a lower bound; the one-thread probe gives the capacity)
    start = time.perf_counter()
    result = rollouts.run(request(rows, tokens))
    return float(result.lengths.sum()) / max(time.perf_counter() - start, 1e-6)


PROBE_REPEATS = 3
"""Probes per measurement (each of the many-thread and the one-thread kind), spread over a few
seconds; the plan reads their median, so one probe caught in another process's burst moves nothing."""
PROBE_SPREAD_S = 2.0  # seconds of pause spread between the probes (a short burst of other work passes)
PROBE_MAX_S = 20.0  # probing stops repeating past this (after one probe of each kind): a busy machine waits less
REFERENCE_SINGLE_THREAD_TOKENS_PER_SECOND = 260.0
"""What one probe thread (``torch.set_num_threads(1)``) measured on the reference machine; with
:data:`REFERENCE_PROBE_TOKENS_PER_SECOND` it says how much a second thread adds there (1.7 x)."""


@dataclass(frozen=True)
class DecodeProbe:
    """What the decode probe saw: the speed now, the machine's own speed with the load taken out
    (what the sizes are fitted to: a busy minute does not halve the demo), and the load."""

    tokens_per_second: float
    """Median of the many-thread probes: what this machine decodes now, under its present load."""
    capacity: float = 0.0
    """What it would decode unloaded: the larger of the median and the one-thread median scaled by
    the reference machine's gain from more threads (one thread is slowed little by one other busy
    process on two cores; many threads stall on the slowest); 0 = ``tokens_per_second``."""
    samples: tuple[float, ...] = ()
    """Every many-thread probe, tok/s."""
    single_thread: tuple[float, ...] = ()
    """Every one-thread probe, tok/s (none on a GPU or with one thread)."""
    load: float | None = None
    """The 1-minute load average while probing (the larger of before and after); None: unknown."""
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    """CPUs of this machine."""

    def __post_init__(self) -> None:
        if not self.capacity:
            object.__setattr__(self, "capacity", self.tokens_per_second)

    @property
    def busy(self) -> bool:
        """Whether the probe ran beside other work: a load of a CPU or more (the probe itself adds
        a little), or a speed now under 0.8 of the capacity."""
        return (self.load is not None and self.load >= 1.0) or self.tokens_per_second < 0.8 * self.capacity

    def describe(self) -> str:
        spread = f" (median of {', '.join(f'{s:.0f}' for s in self.samples)})" if len(self.samples) > 1 else ""
        load = "" if self.load is None else f"; load {self.load:.1f} on {self.cpus} CPUs"
        unloaded = (f"; {self.capacity:.0f} tok/s unloaded (one-thread probe x the reference's thread gain)"
                    if self.capacity > self.tokens_per_second * 1.05 else "")
        return (f"decode probe {self.tokens_per_second:.0f} tok/s{spread}{unloaded}{load}; "
                f"{self.capacity / REFERENCE_PROBE_TOKENS_PER_SECOND:.2f} x the reference machine")

    def record(self) -> dict:
        return {"tokens_per_second": self.tokens_per_second, "capacity": self.capacity, "samples": list(self.samples),
                "single_thread": list(self.single_thread), "load": self.load, "cpus": self.cpus,
                "reference": REFERENCE_PROBE_TOKENS_PER_SECOND}

    @classmethod
    def from_record(cls, record: dict) -> "DecodeProbe":
        """Read back (a record that holds only ``tokens_per_second`` is a probe without load)."""
        return cls(float(record["tokens_per_second"]), float(record.get("capacity") or 0.0),
                   tuple(record.get("samples", ())), tuple(record.get("single_thread", ())), record.get("load"),
                   int(record.get("cpus") or os.cpu_count() or 1))


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # not on every platform
        return None


def measure_probe(lm, task, repeats: int = PROBE_REPEATS, spread_s: float = PROBE_SPREAD_S) -> DecodeProbe:
    """``repeats`` many-thread probes (:func:`probe_tokens_per_second`) and as many one-thread ones,
    alternating, with ``spread_s`` seconds of pause spread between them (fewer past
    :data:`PROBE_MAX_S`), and the load average."""
    before = _load()
    threads = torch.get_num_threads()
    one_thread = threads > 1 and str(getattr(lm, "device", "cpu")).startswith("cpu")
    multi, single = [], []
    started = time.perf_counter()
    for i in range(repeats):
        if i and time.perf_counter() - started > PROBE_MAX_S:
            break
        multi.append(probe_tokens_per_second(lm, task))
        if one_thread:
            torch.set_num_threads(1)
            try:
                single.append(probe_tokens_per_second(lm, task))
            finally:
                torch.set_num_threads(threads)
        if i < repeats - 1:
            time.sleep(spread_s / max(repeats - 1, 1))
    after = _load()
    now = statistics.median(multi)
    gain = REFERENCE_PROBE_TOKENS_PER_SECOND / REFERENCE_SINGLE_THREAD_TOKENS_PER_SECOND
    capacity = max(now, statistics.median(single) * gain) if single else now
    loads = [x for x in (before, after) if x is not None]
    return DecodeProbe(now, capacity, tuple(multi), tuple(single), max(loads) if loads else None)


def decode_probe(lm, cfg: StudyConfig) -> DecodeProbe:
    """The decode probe of a study: :func:`measure_probe` on the study's own task. ``--plan`` and the
    run itself both measure through this one call, so they time the same request."""
    return measure_probe(lm, get_task("arithmetic", **study_task_options(cfg)))


def probe_once(lm, cfg: StudyConfig, path: Path) -> DecodeProbe:
    """The decode probe, measured on a run's first start and read back on every resume, so that a
    resumed run plans, and fits its sizes, as it started."""
    if path.is_file():
        return DecodeProbe.from_record(json.loads(path.read_text()))
    probe = decode_probe(lm, cfg)
    write_json(path, probe.record())
    return probe
