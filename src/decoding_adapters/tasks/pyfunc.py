"""The embedded code task: short, procedurally generated Python functions with unit tests.

The code counterpart of :mod:`~decoding_adapters.tasks.arithmetic`, sized for
SmolLM2-135M-Instruct (calibration: ``benchmarks/calibrate_pyfunc.py``, numbers in
``docs/pyfunc_calibration.md``): on the 200 test problems greedy decoding solves 44.5% at a
32-token budget (47% at 48) and four samples at T=0.5 solve 59% (63.5%). A problem asks for one
named function ("Write a Python function `add_to(x)` that returns x plus 7."); the completion's
code is extracted, run in :mod:`decoding_adapters.sandbox.runner` on the problem's test inputs, and
passes when every return value equals the reference solution's.

Splits: train, validation and test come from the training families (:data:`FAMILIES`, mixture
``PyFuncConfig.families``) exactly as in ``arithmetic`` (each family's pool is shuffled with the
seed and cut into disjoint blocks; see that module's docstring), so they are disjoint by question
text. ``ood`` (``test_size`` problems) comes from held-out families (``PyFuncConfig.ood_families``,
never in the training mixture) with a seed stream of its own; its questions share no template
with the training families, so it is disjoint from the other splits by content.

Why the verifier cannot be fooled: the expected values never enter the sandbox. The sandboxed
program receives the candidate code and the test *inputs* only; it calls the function on each
input and reports the return values (encoded by a strict, type-tagged JSON encoder) on its last
output line. Comparison with the reference happens here, outside. Code that prints "all tests
passed", exits early, or forges the report line can at most claim return values of its choosing,
which is no easier than returning them. Values are parsed with :func:`json.loads` only.
"""

from __future__ import annotations

import collections
import hashlib
import inspect
import json
import math
import random
import secrets
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, NamedTuple

from ..sandbox.runner import SandboxConfig, execute
from .arithmetic import allocate_blocks, family_schedule
from .base import SPLITS, Problem, Task, chat_messages, register_task, resolve_system_prompt
from .extract import extract_function_code, guarded
from .pyfunc_families import ALL_FAMILIES, FAMILY_OPS, OOD_FAMILIES, TRAIN_FAMILIES, Op

__all__ = ["ALL_FAMILIES", "FAMILY_OPS", "OOD_FAMILIES", "TRAIN_FAMILIES", "Op", "PyFuncConfig", "PyFuncTask"]


class Spec(NamedTuple):
    """One distinct problem of a family pool."""

    question: str
    """The full request, naming the function and its parameters."""
    name: str
    """The function's name."""
    solution: str
    """Reference implementation (trusted source, run here, never in the sandbox)."""
    kind: str
    """Kind of test input (see :func:`make_inputs`); the inputs themselves come from :func:`make_tests`."""


Pool = list[Spec]
"""A family's distinct problems, in a fixed order."""


@dataclass(frozen=True)
class PyFuncConfig:
    """Everything that determines the generated problems; same config, same problems."""

    # Default mixture from measurements with SmolLM2-135M (docs/pyfunc_calibration.md).
    families: Mapping[str, float] = field(
        default_factory=lambda: {
            "add_const": 0.05,
            "affine": 0.2,
            "str_basic": 0.05,
            "str_param": 0.25,
            "list_basic": 0.05,
            "list_param": 0.25,
            "cond": 0.15,
        },
        hash=False,
    )
    """Training mixture weights by family name (see :data:`FAMILIES`); a list means equal weights."""
    ood_families: Mapping[str, float] | None = field(default=None, hash=False)
    """Held-out families of the ``ood`` split, never in ``families`` (empty: no ood split); None
    means :data:`OOD_FAMILIES` (equal weights) less any family that ``families`` uses."""
    train_size: int = 500
    """Problems in the train split."""
    validation_size: int = 100
    """Problems in the validation split."""
    test_size: int = 200
    """Problems in the test split (and in the ood split)."""
    seed: int = 0
    """Seed for the shuffles that choose and order the questions of each split."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "families", _weights(self.families, "families"))
        ood = self.ood_families
        if ood is None:
            ood = {name: 1.0 for name in OOD_FAMILIES if name not in self.families}
        object.__setattr__(self, "ood_families", _weights(ood, "ood_families", allow_empty=True))
        shared = sorted(set(self.families) & set(self.ood_families))
        if shared:
            raise ValueError(f"ood_families must be held out of families; both have {shared}")
        for name in ("train_size", "validation_size", "test_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {getattr(self, name)!r}")

    @property
    def sizes(self) -> dict[str, int]:
        """Problems per split."""
        return {"train": self.train_size, "validation": self.validation_size, "test": self.test_size}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``PyFuncConfig(**d)`` rebuilds the same config."""
        return asdict(self)


def _weights(families: Any, label: str, allow_empty: bool = False) -> dict[str, float]:
    if isinstance(families, str) or not isinstance(families, (Mapping, Sequence)):
        raise ValueError(f"{label} must be a mapping name -> weight or a list of names, got {families!r}")
    weights = dict(families) if isinstance(families, Mapping) else dict.fromkeys(families, 1.0)
    if not weights and not allow_empty:
        raise ValueError(f"{label} must name at least one of {sorted(ALL_FAMILIES)}")
    for name, weight in weights.items():
        if name not in ALL_FAMILIES:
            raise ValueError(f"unknown pyfunc family {name!r}; known: {sorted(ALL_FAMILIES)}")
        if not (isinstance(weight, (int, float)) and weight > 0):
            raise ValueError(f"family weight must be > 0, got {name}={weight} (drop the family instead)")
    return {name: float(w) for name, w in weights.items()}


# --------------------------------------------------------------------------- test inputs

_SAMPLE_WORDS = ("apple", "tree", "sky", "banana", "river", "stone", "owl", "ice", "tiger", "rose", "elm", "sun")
_SAMPLE_TEXTS = ("hello", "Python", "data", "racecar", "a", "Open AI", "testing", "xyz", "Banana", "loop")


def make_inputs(kind: str, rng: random.Random, count: int = 5) -> tuple[tuple[Any, ...], ...]:
    """``count`` test argument tuples of ``kind``; the first ones cover edge cases (0, negatives)."""
    if kind == "int":
        fixed = [0, -7, 12]
        return tuple((v,) for v in fixed + [rng.randint(-50, 99) for _ in range(count - len(fixed))])
    if kind == "str":
        texts = rng.sample(_SAMPLE_TEXTS, count)
        return tuple((t,) for t in texts)
    if kind == "list":
        lists = [[rng.randint(-5, 12) for _ in range(rng.randint(1, 6))] for _ in range(count)]
        return tuple((v,) for v in lists)
    if kind == "words":
        return tuple((rng.sample(_SAMPLE_WORDS, rng.randint(2, 5)),) for _ in range(count))
    if kind == "pair":
        return tuple((rng.randint(-9, 40), rng.randint(1, 12)) for _ in range(count))
    raise ValueError(f"unknown input kind {kind!r}")


def expand(op: Op) -> Pool:
    """Every distinct problem of one template: names x parameters x constants."""
    pool = []
    for name in op.names:
        for param in op.params:
            for const in op.constants:
                values = dict(zip("cd", const))
                names = dict(zip("ab", param.split(", ")))
                phrase = op.phrase.format(p=param, **names, **values)
                question = f"Write a Python function `{name}({param})` that {phrase}."
                body = op.body.format(p=param, **names, **values)
                solution = f"def {name}({param}):\n    return {body}\n"
                pool.append(Spec(question, name, solution, op.inputs))
    return pool


def make_tests(spec: Spec, count: int = 5) -> tuple[tuple[tuple[Any, ...], ...], list[Any]]:
    """Test inputs of ``spec`` and the reference's outputs on them.

    Inputs are drawn from a generator seeded by the question (so they are fixed per question),
    redrawn up to 20 times until the outputs are not all equal: a constant function must fail.
    """
    for attempt in range(20):
        rng = random.Random(f"{spec.question}/{attempt}")  # str seeds are stable across runs
        inputs = make_inputs(spec.kind, rng, count)
        outputs = reference_outputs(spec.solution, spec.name, inputs)
        if len({json.dumps(encode_value(v)) for v in outputs}) > 1:
            break
    return inputs, outputs


def family_pool(family: str) -> Pool:
    """A family's distinct problems, in a fixed order."""
    if family not in FAMILY_OPS:
        raise ValueError(f"unknown pyfunc family {family!r}; known: {sorted(FAMILY_OPS)}")
    return [spec for op in FAMILY_OPS[family] for spec in expand(op)]


# --------------------------------------------------------------------------- splits


def _serve(pools: Mapping[str, Pool], schedules: Mapping[str, list[str]], seed: str) -> dict[str, list[Problem]]:
    """Cut each family's shuffled pool into disjoint blocks, one per split (test first)."""
    order = [s for s in ("ood", "test", "validation", "train") if s in schedules]
    served: dict[tuple[str, str], list[Spec]] = {}
    for family, pool in pools.items():
        pool = list(pool)
        random.Random(f"{seed}/{family}").shuffle(pool)
        demands = {s: schedules[s].count(family) for s in order}
        start = 0
        for split, share in allocate_blocks(len(pool), demands).items():
            block = pool[start : start + share]
            start += share
            served[split, family] = [block[i % len(block)] for i in range(demands[split])] if block else []
    return {split: _problems(split, schedules[split], served) for split in schedules}


def _problems(split: str, schedule: list[str], served: Mapping[tuple[str, str], list[Spec]]) -> list[Problem]:
    cursor = dict.fromkeys(schedule, 0)
    problems = []
    for index, family in enumerate(schedule):
        spec = served[split, family][cursor[family]]
        cursor[family] += 1
        inputs, outputs = make_tests(spec)
        meta = {
            "family": family,
            "split": split,
            "entry_point": spec.name,
            "inputs": [list(args) for args in inputs],
            "expected": [encode_value(v) for v in outputs],
        }
        problems.append(Problem(f"pyfunc/{split}/{index}", spec.question, spec.solution, meta))
    return problems


def build_splits(cfg: PyFuncConfig) -> dict[str, list[Problem]]:
    """train, validation, test (training families) and ood (held-out families)."""
    schedules = {s: family_schedule(cfg.families, n) for s, n in cfg.sizes.items()}
    splits = _serve({f: family_pool(f) for f in cfg.families}, schedules, str(cfg.seed))
    ood = {"ood": family_schedule(cfg.ood_families, cfg.test_size) if cfg.ood_families else []}
    splits.update(_serve({f: family_pool(f) for f in cfg.ood_families}, ood, f"{cfg.seed}/ood"))
    return splits


def reference_outputs(solution: str, name: str, inputs: Sequence[Sequence[Any]]) -> list[Any]:
    """Return values of the trusted reference ``solution`` (our own generated source) on ``inputs``."""
    namespace: dict[str, Any] = {}
    exec(solution, namespace)  # trusted: built by expand() from FAMILY_OPS, never model output
    return [namespace[name](*json.loads(json.dumps(list(args)))) for args in inputs]


# --------------------------------------------------------------------------- values


def encode_value(value: Any, depth: int = 0) -> Any:
    """A JSON-ready, type-tagged copy of a plain value; TypeError for anything else.

    Exact types only (a subclass of int with a lying ``__eq__`` is refused); tuples, dicts,
    non-finite floats and bools are tagged so that ``True`` never equals ``1`` and ``(1,)`` never
    equals ``[1]``. This function's source also runs inside the sandbox (see :func:`harness`).
    """
    kind = type(value)
    if depth > 32:
        raise TypeError("value nested too deeply")
    if value is None or kind is str:
        return value
    if kind is bool:
        return {"bool": value}
    if kind is int:
        return value
    if kind is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {"float": repr(value)}
    if kind is list:
        return [encode_value(v, depth + 1) for v in value]
    if kind is tuple:
        return {"tuple": [encode_value(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in value.items()]}
    raise TypeError("unsupported return type " + kind.__name__)


# Read once, at import: the harness must embed the encoder this process runs, even if the file
# changes on disk during a long run.
_ENCODER_SOURCE = inspect.getsource(encode_value)


def same_value(got: Any, expected: Any) -> bool:
    """Equality of two encoded values: floats within 1e-9 (relative), everything else exact by type."""
    if isinstance(expected, float) or isinstance(got, float):
        if type(got) not in (int, float) or type(expected) not in (int, float):
            return False
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
    if type(got) is not type(expected):
        return False
    if isinstance(expected, list):
        return len(got) == len(expected) and all(same_value(g, e) for g, e in zip(got, expected))
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_value(got[k], expected[k]) for k in expected)
    return got == expected


# --------------------------------------------------------------------------- the sandboxed harness

_HARNESS = r"""
import json as _json, os as _os, sys as _sys
_report_fd = _os.dup(1)  # our channel; the candidate's prints go to /dev/null
_null = _os.open(_os.devnull, _os.O_WRONLY)
_os.dup2(_null, 1)
_sys.stdout = open(_os.devnull, "w")
_dumps, _loads, _type, _repr = _json.dumps, _json.loads, type, repr

{encoder}

def _report(line):
    _os.write(_report_fd, (MARKER + _dumps(line) + "\n").encode())
    _os._exit(0)  # skip atexit handlers the candidate may have registered

_namespace = {{"__name__": "__candidate__"}}
try:
    exec(compile(CODE, "candidate.py", "exec"), _namespace)
except BaseException as _exc:  # SystemExit too: a program that exits early did not define anything useful
    if NAME not in _namespace:
        _report({{"error": "definition failed: " + _type(_exc).__name__}})
_function = _namespace.get(NAME)
if not callable(_function):
    _report({{"error": "no function " + NAME}})
_outputs = []
for _args in _loads(INPUTS):
    try:
        _outputs.append({{"value": encode_value(_function(*_args))}})
    except BaseException as _exc:
        _outputs.append({{"error": _type(_exc).__name__}})
_report({{"outputs": _outputs}})
"""


def harness(code: str, name: str, inputs: Sequence[Sequence[Any]], marker: str) -> str:
    """The program the sandbox runs: define ``code``, call ``name`` on each input, report the
    encoded return values on one line starting with ``marker``. No expected value is in it."""
    header = (
        f"CODE = {code!r}\nNAME = {name!r}\nINPUTS = {json.dumps([list(a) for a in inputs])!r}\nMARKER = {marker!r}\n"
    )
    # The future import keeps the encoder's annotations unevaluated (``Any`` is not defined there).
    return "from __future__ import annotations\n" + header + _HARNESS.format(encoder=_ENCODER_SOURCE)


class RunReport(NamedTuple):
    """What the sandboxed harness reported for one candidate."""

    outputs: tuple[Any, ...] | None
    """Per input: ``{"value": encoded}`` or ``{"error": exception name}``; None if the run failed."""
    status: str
    """The sandbox status ("timeout", "memory", "error" when the run failed without a report,
    "output_limit", "setup_failed", "ok" when it reported outputs), else "no code" (nothing to
    run), "not defined" (syntax error, crash before the definition, or no such function), "no
    report" or "bad report"."""
    detail: str = ""
    """Why there are no outputs (harness error, last stderr line)."""


UNSETTLED_STATUSES = frozenset({"timeout", "memory", "error", "setup_failed"})
"""Run statuses that may say more about the machine at that moment (a busy host, a hostile run
beside it, a sandbox layer that could not be set up) than about the code: never cached, so the
next reward or answer for the same code runs it again."""

MAX_REPORT_CHARS = 256 * 1024
"""Longest report (JSON text) that is parsed; a longer one counts as no report. The sandbox keeps
64 KiB of output by default, so only a caller that raised that limit meets this one."""
MAX_REPORT_DEPTH = 128
"""Deepest nesting of JSON lists and objects a report may have. The harness's encoder refuses
values nested over 32 levels, which with the type tags and the report's own wrapping is at most
about 100 levels of JSON; deeper text is forged, and parsing it (or comparing, printing or
hashing what it parses to) would hit Python's recursion limit."""


def parse_report(stdout: str, marker: str) -> dict[str, Any] | None:
    """The harness's report: the JSON object after the last line starting with ``marker``
    (json only); None for anything else, including text over :data:`MAX_REPORT_CHARS`, nesting
    over :data:`MAX_REPORT_DEPTH` or numbers over Python's digit limit. Never raises."""
    line = next((line for line in reversed(stdout.splitlines()) if line.startswith(marker)), None)
    if line is None:
        return None
    text = line[len(marker) :]
    if len(text) > MAX_REPORT_CHARS:
        return None
    try:
        report = json.loads(text)
    except (ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(report, dict) or not nesting_within(report, MAX_REPORT_DEPTH):
        return None
    return report


def nesting_within(value: Any, limit: int) -> bool:
    """Whether lists and dicts in ``value`` nest at most ``limit`` deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (list, dict)))
    return True


def run_candidate(code: str, name: str, inputs: Sequence[Sequence[Any]], config: SandboxConfig) -> RunReport:
    """Run one candidate in the sandbox on ``inputs`` and collect its return values.

    The one place that talks to the sandbox: swap it for a batched API without touching the rest.
    """
    if not code.strip():
        return RunReport(None, "no code", "no definition of the function found")
    marker = f"@@pyfunc-{secrets.token_hex(8)}@@"
    result = execute(harness(code, name, inputs, marker), "", config)
    report = parse_report(result.stdout, marker)
    if report is None:
        tail = result.stderr.strip().splitlines()[-1:] or [""]
        return RunReport(None, result.status if not result.ok else "no report", tail[0][:200])
    if "error" in report:  # the code did not compile, failed before defining the function, or lacks it
        return RunReport(None, "not defined", str(report["error"])[:200])
    outputs = report.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != len(inputs):
        return RunReport(None, "bad report", "")
    return RunReport(tuple(outputs), result.status)


def outputs_pass(outputs: Sequence[Any] | None, expected: Sequence[Any]) -> bool:
    """True if every reported output is a value equal to the expected one."""
    if outputs is None or len(outputs) != len(expected):
        return False
    return all(isinstance(o, dict) and "value" in o and same_value(o["value"], e) for o, e in zip(outputs, expected))


# --------------------------------------------------------------------------- the report cache


class ReportCache:
    """Run reports by a digest of what was run, bounded in bytes; least recently used out first.

    Lives in the trainer's process, which a completion must not be able to grow: each entry keeps
    the 32-byte digest of (code, name, inputs) as its key and the outputs as compact JSON text
    (a report parsed into Python objects costs ~20 times its JSON: a 64 KiB report of nested
    lists took ~1.5 MiB), and entries are dropped once their sizes add up to ``max_bytes``. A
    report larger than a quarter of ``max_bytes`` is not kept at all. Thread-safe.
    """

    ENTRY_OVERHEAD = 256
    """Bytes counted per entry besides its texts (key, tuple, dict slot)."""

    def __init__(self, max_bytes: int = 32 * 2**20, max_entries: int = 8192) -> None:
        if max_bytes <= 0 or max_entries <= 0:
            raise ValueError(f"max_bytes and max_entries must be positive, got {max_bytes}, {max_entries}")
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.nbytes = 0
        """Bytes counted for the entries held now (at most ``max_bytes``)."""
        self._entries: collections.OrderedDict[bytes, tuple[str | None, str, str, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(code: str, name: str, inputs_json: str) -> bytes:
        """The digest an entry is kept under."""
        digest = hashlib.sha256()
        for part in (code, name, inputs_json):
            data = part.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
        return digest.digest()

    def get(self, key: bytes) -> RunReport | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
        outputs_json, status, detail, _ = entry
        return RunReport(None if outputs_json is None else tuple(json.loads(outputs_json)), status, detail)

    def put(self, key: bytes, report: RunReport) -> None:
        outputs_json = None if report.outputs is None else json.dumps(list(report.outputs), sort_keys=True)
        size = self.ENTRY_OVERHEAD + len(outputs_json or "") + len(report.status) + len(report.detail)
        if size > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._entries:
                self.nbytes -= self._entries.pop(key)[3]
            self._entries[key] = (outputs_json, report.status, report.detail, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes or len(self._entries) > self.max_entries:
                self.nbytes -= self._entries.popitem(last=False)[1][3]


# --------------------------------------------------------------------------- task


@register_task("pyfunc")
class PyFuncTask(Task):
    """Procedural Python function writing (splits: train, validation, test, ood).

    Options are :class:`PyFuncConfig` fields (``get_task("pyfunc", seed=0, test_size=100)``), or a
    whole ``config=``, plus ``system_prompt=``, ``timeout_s=``/``memory_mb=`` (sandbox limits per
    run) and ``workers=`` (sandbox runs in parallel in :meth:`reward_batch`).
    """

    splits: ClassVar[tuple[str, ...]] = SPLITS + ("ood",)
    instruction: ClassVar[str] = " Reply with the function in a ```python code block."
    cot_instruction: ClassVar[str] = " Think step by step, then give the function in a ```python code block."

    def __init__(
        self,
        config: PyFuncConfig | None = None,
        *,
        system_prompt: str | None = None,
        timeout_s: float = 4.0,
        memory_mb: int = 512,
        workers: int = 4,
        **overrides: Any,
    ) -> None:
        known = {f.name for f in fields(PyFuncConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            accepted = sorted(known | {"config", "system_prompt", "timeout_s", "memory_mb", "workers"})
            raise ValueError(f"task 'pyfunc' has no option(s) {unknown}; accepted: {accepted}")
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        self.config = replace(config or PyFuncConfig(), **overrides)
        self.system_prompt = resolve_system_prompt(system_prompt)
        self.sandbox = SandboxConfig(timeout_s=timeout_s, memory_mb=memory_mb)
        self.workers = workers
        self._splits: dict[str, list[Problem]] | None = None
        # Outputs by (code, entry point, inputs): reward and extract_answer share one sandbox run.
        self._cache = ReportCache()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable for worker processes (Ray, DDP): the cache and the built splits stay behind.
        return {k: v for k, v in self.__dict__.items() if k not in ("_cache", "_splits")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _splits=None)
        self._cache = ReportCache()

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        if self._splits is None:  # built once: all splits come from one allocation
            self._splits = build_splits(self.config)
        return list(self._splits[split])

    def draw_order(self, problems: Sequence[Problem], seed: int) -> list[Problem]:
        """The split's own order: every prefix keeps the family mix (a subset is its first problems)."""
        return list(problems)

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        suffix = self.cot_instruction if cot else self.instruction
        return chat_messages(self.system_prompt, problem.question + suffix)

    def outputs(self, problem: Problem, completion: str) -> RunReport:
        """The sandboxed run of ``completion``'s code on ``problem``'s test inputs (cached)."""
        name = problem.meta["entry_point"]
        code = extract_function_code(completion, name)
        inputs_json = json.dumps(problem.meta["inputs"])
        key = ReportCache.key(code, name, inputs_json)
        report = self._cache.get(key)
        if report is None:
            report = run_candidate(code, name, problem.meta["inputs"], self.sandbox)
            if report.status not in UNSETTLED_STATUSES:
                self._cache.put(key, report)
        return report

    def reward(self, problem: Problem, completion: str) -> float:
        return guarded(self._reward, problem, completion, default=0.0)

    def _reward(self, problem: Problem, completion: str) -> float:
        report = self.outputs(problem, completion)
        return 1.0 if outputs_pass(report.outputs, problem.meta["expected"]) else 0.0

    def reward_batch(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        """:meth:`reward` of each ``(problem, completion)`` pair, ``workers`` sandbox runs at a time
        (each completion still gets its own isolated interpreter)."""
        if len(problems) != len(completions):
            raise ValueError(f"got {len(problems)} problems for {len(completions)} completions")
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(self.reward, problems, completions))

    def extract_answer(self, problem: Problem, completion: str) -> str:
        """The function's behaviour on the tests (JSON of its outputs), so that majority voting
        groups programs that act alike; "" when the code could not be run."""
        return guarded(self._answer, problem, completion, default="")

    def _answer(self, problem: Problem, completion: str) -> str:
        report = self.outputs(problem, completion)
        return "" if report.outputs is None else json.dumps(report.outputs, sort_keys=True)
