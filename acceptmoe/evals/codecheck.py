"""Code grading as EvalPlus grades it, with the verdict decided in the parent process.

A reply is read into code by `evalplus_code` (EvalPlus's reading of a whole solution, a body-only
completion after the prompt and a chat reply), which the tasks (`acceptmoe.evals.tasks`) call through
`acceptmoe.evals.contained`, never in the grader's process. One sanitised piece of code is graded on one
problem in two steps:
1. Run: the harness (`acceptmoe.evals.harness`) and the code run in the sandbox
   (`acceptmoe.evals.sandbox`), one process per test set, as `evalplus.eval.unsafe_execute` runs them,
   under the rules of `acceptmoe.evals.rules.CodeRules` (EvalPlus 0.3.1's by default: reliability_guard,
   installed packages importable read-only, threads allowed, its per-input and per-run time limits).
2. Compare: as each return value arrives, the parent decodes it into a value (`codec`, `readback`) and
   compares it with the expected output by EvalPlus's rules (`Comparer`: `==`, MBPP's and HumanEval's
   special oracles, float tolerance `atol`, at least 1e-6 when the expected value is a float or a
   list/tuple of floats, with numpy's `allclose(rtol=1e-7)` and the same type and length); the first
   failure stops the run.

The program never sees the expected outputs, and nothing it prints, patches or exits with is a verdict:
it passes a test set only if the parent receives, for every input and in time by the parent's clock, a
value equal to the expected one. What it sends back is read under byte caps (per value: twice the
expected value's encoding plus 64 KiB, at most `codec.VALUE_CAP`, beyond which the harness sends a
digest; per line and in all accordingly), with bounded parsing and decoding, and failure reasons render
values with bounded length (`readback.brief`): no output crashes or stalls the grader, and whatever goes
wrong while grading one piece of code is that code's failure, with its reason.

The expected outputs come from the canonical solution run through the same harness in the sandbox
(without reliability_guard or time limits, as evalplus's trusted_exec), and are cached on disk
(`cache_dir()`, readable by the caller only) under a hash of everything they depend on (harness and codec
source, Python version, canonical code, inputs), with their reference times and encoded sizes.
Base and plus are separate runs, as in EvalPlus; "plus" passes only when base and plus inputs both pass.

Reused from evalplus 0.3.1 (installed without its dependencies; its light ones are in pyproject.toml):
`evalplus.sanitize.sanitize`; `evalplus/eval/utils.py` (run inside the sandbox); `evalplus.eval.is_floats`
and the special oracles of `evalplus.eval._special_oracle`; `evalplus.data.mbpp.mbpp_deserialize_inputs`;
the time-limit constants of `evalplus.config`. The comparison of `evalplus.eval.unsafe_execute` is
restated in `Comparer` because there it runs inside the untrusted process; the parity tests check our
verdicts against `evalplus.evaluate` itself. Deviations: `acceptmoe.evals.rules`.
"""
from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from acceptmoe.errors import UserError
from acceptmoe.evals import codec, harness, readback
from acceptmoe.evals.extract import defines
from acceptmoe.evals.rules import DEFAULT, EVALPLUS_VERSION, CodeRules
from acceptmoe.evals.sandbox import ExecResult, Limits, SandboxError, run_program
from acceptmoe.paths import cache_root

RESULT_MARK = harness.RESULT_MARK
DATASETS = ("humaneval", "mbpp", "plain")  # whose oracle rules apply; "plain": exact match and float tolerance
START_S = 60.0          # for the sandboxed interpreter to start and report "start" (not part of a run's limit)
MIN_CAP = 64 << 10      # the byte cap of a returned value is at least this
CANONICAL_LIMITS = Limits(timeout_s=1200.0, memory_mb=4096, file_mb=256, output_chars=2000, packages=True)


class EvalPlusMissing(UserError):
    """evalplus is not installed (or another version is)."""


def evalplus():
    """The evalplus modules this grader reuses, imported on first use."""
    try:
        import evalplus as package
        import evalplus.config as config
        import evalplus.data.mbpp as mbpp
        import evalplus.eval as evaluation
        import evalplus.eval._special_oracle as oracle
        import evalplus.sanitize as sanitizer
    except ImportError as exc:
        raise EvalPlusMissing(f"code grading needs evalplus=={EVALPLUS_VERSION} ({exc}); install it with "
                              f"`pip install --no-deps evalplus=={EVALPLUS_VERSION}` plus the project's `eval` "
                              "extra (./reproduce.sh does both)") from None
    if not package.__version__.startswith(EVALPLUS_VERSION):
        raise EvalPlusMissing(f"code grading is pinned to evalplus=={EVALPLUS_VERSION}, found {package.__version__}; "
                              f"run `pip install --no-deps evalplus=={EVALPLUS_VERSION}`")
    return config, mbpp, evaluation, oracle, sanitizer


def sanitize(code: str, entry_point: str) -> str:
    """evalplus's sanitiser: imports, `entry_point` and the definitions it reaches, from the longest
    syntactically valid span of lines (its cost grows with the cube of the number of lines: run it on
    untrusted text through `acceptmoe.evals.contained`, as the tasks do)."""
    return evalplus()[4].sanitize(code, entry_point)


def evalplus_code(reply: str, entry_point: str, prompt: str = "") -> str:
    """The code EvalPlus grades for a reply (reading "evalplus"), in each form it reads: a whole solution
    or a chat reply (fenced blocks and prose) is sanitised alone, as evalplus's codegen reads a chat
    model's reply; a reply whose sanitised code defines no `entry_point` (a body-only completion) is read
    after the prompt, as EvalPlus reads a base model's completion (`prompt + completion`), then sanitised.
    Untrusted text: call it through `acceptmoe.evals.contained`, as the tasks do."""
    code = sanitize(reply, entry_point)
    if not prompt or defines(code, entry_point):
        return code
    return sanitize(prompt + reply, entry_point)


@dataclass(frozen=True)
class CodeProblem:
    """One problem: the function to call, the trusted reference program, and named input sets."""

    task_id: str
    entry_point: str
    canonical: str  # a program defining entry_point (e.g. prompt + canonical_solution)
    test_sets: tuple[tuple[str, list], ...]  # (name, inputs); each input is the list of call arguments
    dataset: str = "plain"
    atol: float = 0.0

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset rules {self.dataset!r}; valid: {', '.join(DATASETS)}")


@dataclass(frozen=True)
class SetVerdict:
    passed: bool
    reason: str  # "" when passed; else what failed first
    status: str  # the sandbox's status of the harness process ("not run" when it never ran)


@dataclass(frozen=True)
class CodeVerdict:
    """Verdicts per test set (EvalPlus's "plus" = base and plus inputs both pass) and the graded code."""

    sets: dict[str, SetVerdict]
    code: str

    def passed(self, name: str) -> bool:
        return self.sets[name].passed

    def details(self) -> dict:
        out: dict = {}
        for name, verdict in self.sets.items():
            out[name] = verdict.passed
            out[f"{name}_status"] = verdict.status
            if verdict.reason:
                out[f"{name}_reason"] = verdict.reason[:500]
        return out

    @classmethod
    def failed(cls, names, code: str, reason: str) -> CodeVerdict:
        """Every test set failed for one reason, without running (e.g. the reply could not be read)."""
        return cls({n: SetVerdict(False, reason, "not run") for n in names}, code)


# ----------------------------------------------------------------------------------------------------
# Expected outputs: the canonical solution in the same harness, cached on disk.

def cache_dir() -> Path:
    """`paths.cache_root()`/expected-outputs (mode 0700)."""
    path = cache_root() / "expected-outputs"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _cache_key(problem: CodeProblem, name: str, inputs: list) -> str:
    blob = json.dumps([harness.harness_source(), list(sys.version_info[:2]), problem.canonical, problem.entry_point,
                       name, codec.encode(inputs)], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Expected:
    values: list
    seconds: list
    sizes: list  # bytes of each value's encoding (a digest's: the size it stands for)
    encode_seconds: list  # from "called" to the value line, per input (the encoding's reference time)


def _load_cached(path: Path) -> Expected | None:
    try:
        data = json.loads(path.read_text())
        values = [codec.decode(v) for v in data["values"]]
        return Expected(values, [float(s) for s in data["seconds"]], [int(s) for s in data["sizes"]],
                        [float(s) for s in data["encode_seconds"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _encoded(values: list) -> tuple[list, list[int]]:
    encoded = [codec.encode_result(v) for v in values]
    sizes = [v.weight if type(v) is codec.Digest else len(json.dumps(e, separators=(",", ":"), allow_nan=False))
             for v, e in zip(values, encoded, strict=True)]
    return encoded, sizes


def _store(path: Path, expected: Expected) -> None:
    encoded, _ = _encoded(expected.values)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump({"values": encoded, "seconds": expected.seconds, "sizes": expected.sizes,
                   "encode_seconds": expected.encode_seconds}, fh,
                  separators=(",", ":"), allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class CanonicalFailed(RuntimeError):
    """The reference solution did not return on every input (a data or machine problem, not a verdict)."""


def _run_watched(source: str, limits: Limits, watch: harness.SetWatch) -> ExecResult | None:
    """One harness run; a failure of the grading itself (not of the sandbox) is the watch's failure."""
    try:
        return run_program(source, limits, watch=watch)
    except SandboxError:
        raise
    except Exception as exc:
        watch._fail(f"grading failed ({type(exc).__name__}: {readback.brief(str(exc), 200)})")
        return None


def expected_outputs(problems: list[CodeProblem], workers: int = 2) -> list[dict[str, Expected]]:
    """Expected outputs and reference times per test set of each problem, from the cache or from running
    the canonical solutions in the sandbox."""
    folder = cache_dir()
    found: list[dict[str, Expected]] = [{} for _ in problems]
    missing = []  # (problem index, set name, inputs, cache path)
    for p, problem in enumerate(problems):
        for name, inputs in problem.test_sets:
            path = folder / f"{_cache_key(problem, name, inputs)}.json"
            cached = _load_cached(path)
            if cached is not None and len(cached.values) == len(inputs):
                found[p][name] = cached
            else:
                missing.append((p, name, inputs, path))

    def run(item):
        p, name, inputs, _ = item
        caps = [codec.VALUE_CAP] * len(inputs)
        watch = harness.SetWatch(len(inputs), None, CANONICAL_LIMITS.timeout_s, caps, keep=True, total_cap=1 << 34,
                                 names=codec.SHARED)  # trusted: its named subclasses are the ones replies share
        source = harness.program(problems[p].canonical, problems[p].entry_point, inputs, None, caps, guard=False)
        result = _run_watched(source, CANONICAL_LIMITS, watch)
        return watch, result

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for (p, name, _, path), (watch, result) in zip(missing, pool.map(run, missing), strict=True):
            if not watch.passed():
                status = result.status if result is not None else "not run"
                raise CanonicalFailed(f"{problems[p].task_id} ({name}): the canonical solution failed: "
                                      f"{watch.failure or f'stopped after {watch.returned} inputs'} (status {status})")
            found[p][name] = Expected(watch.values, watch.seconds, _encoded(watch.values)[1], watch.encode_seconds)
            _store(path, found[p][name])
    return found


# ----------------------------------------------------------------------------------------------------
# Comparison, as evalplus.eval.unsafe_execute (evalplus 0.3.1) does it, on decoded values.

class Comparer:
    """EvalPlus's per-input comparison. Like EvalPlus, a float expectation raises `atol` from 0 to 1e-6
    for that input and every later one, so one Comparer serves one test set, inputs in order."""

    def __init__(self, dataset: str, entry_point: str, atol: float, find_zero_fix: bool = True):
        self.dataset, self.entry_point, self.atol, self.find_zero_fix = dataset, entry_point, atol, find_zero_fix
        _, _, self.evaluation, self.oracle, _ = evalplus()

    def __call__(self, inp, out, exp) -> bool:
        try:
            return self._compare(inp, out, exp)
        except Exception:
            return False

    def _compare(self, inp, out, exp) -> bool:
        ep, oracle = self.entry_point, self.oracle
        exact_match = out == exp
        if self.dataset == "mbpp":
            if ep == "are_equivalent":  # Mbpp/164
                exact_match = True
            elif ep == "sum_div":  # Mbpp/295
                exact_match = exact_match or out == 0
            elif ep == "surface_Area":  # Mbpp/581
                exact_match = exact_match or abs(out - oracle._surface_Area(*inp)) <= self.atol
            elif ep == "digit_distance_nums":  # Mbpp/558
                exact_match = exact_match or out == oracle._digit_distance_nums(*inp)
            elif ep in oracle.MBPP_OUTPUT_SET_EQ_TASKS:
                exact_match = set(codec.distinct_members(list(out))) == set(exp)
            elif ep in oracle.MBPP_OUTPUT_NOT_NONE_TASKS:
                exact_match = out == exp if isinstance(out, bool) else exp == (out is not None)
        if self.dataset == "humaneval" and ep == "find_zero":  # HumanEval/32
            # evalplus 0.3.1 skips recording the pass after this check (evalplus#201): every solution fails
            return bool(self.find_zero_fix and abs(oracle._poly(*inp, out)) <= self.atol)
        if self.atol == 0 and self.evaluation.is_floats(exp):
            self.atol = 1e-6
        if not exact_match and self.atol != 0:
            if type(out) is not type(exp):           # identity: no metaclass __eq__ of the program runs
                return False
            if isinstance(exp, (list, tuple)) and len(out) != len(exp):
                return False
            return bool(np.allclose(out, exp, rtol=1e-07, atol=self.atol))
        return bool(exact_match)


def compare(dataset: str, entry_point: str, inputs: list, outputs: list, expected: list, atol: float,
            find_zero_fix: bool = True) -> list[bool]:
    """Per-input verdicts of `outputs` against `expected` by EvalPlus's rules."""
    same = Comparer(dataset, entry_point, atol, find_zero_fix)
    return [same(inp, out, exp) for inp, out, exp in zip(inputs, outputs, expected, strict=False)]


def time_limits(reference_seconds: list[float]) -> list[float]:
    """EvalPlus's per-input limits: max(DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR x reference)."""
    config = evalplus()[0]
    return [max(config.DEFAULT_MIN_TIME_LIMIT, config.DEFAULT_GT_TIME_LIMIT_FACTOR * t) for t in reference_seconds]


def run_limit(per_input: list[float], rules: CodeRules) -> float:
    """EvalPlus's limit of one run: min(its cap, the sum of the per-input limits) + 2 s (its process
    timeout is that sum + 1 s, and it joins the process with another second)."""
    return min(rules.run_cap_s, sum(per_input)) + 2.0


def value_caps(sizes: list[int]) -> list[int]:
    """The byte cap of each returned value: twice the expected value's encoding plus 64 KiB, at most
    codec.VALUE_CAP (beyond its cap a value travels as a digest)."""
    return [min(codec.VALUE_CAP, 2 * s + MIN_CAP) for s in sizes]


def candidate_limits(rules: CodeRules, run_s: float, encode_s: list[float]) -> Limits:
    """The sandbox's limits of one run: its wall clock is START_S + the run limit + `harness.allowance`."""
    timeout = START_S + run_s + harness.allowance(encode_s)
    return Limits(timeout_s=timeout, memory_mb=rules.memory_mb, cpu_s=4 * math.ceil(timeout) + 1, file_mb=256,
                  output_chars=2000, threads=rules.threads, packages=rules.packages)


def _judge(problem: CodeProblem, inputs: list, wanted: list, rules: CodeRules):
    same = Comparer(problem.dataset, problem.entry_point, problem.atol, rules.find_zero_fix)

    def judge(i: int, value) -> str | None:
        if same(inputs[i], value, wanted[i]):
            return None
        return f"input {i}: got {readback.brief(value)}, expected {readback.brief(wanted[i])}"
    return judge


def grade_many(problems: list[CodeProblem], codes: list[str], workers: int = 2,
               rules: CodeRules = DEFAULT) -> list[CodeVerdict]:
    """Grade sanitised `codes[i]` on `problems[i]`: every test set runs in its own sandboxed process."""
    if len(problems) != len(codes):
        raise ValueError(f"{len(problems)} problems but {len(codes)} codes")
    expected = expected_outputs(problems, workers)
    not_none = evalplus()[3].MBPP_OUTPUT_NOT_NONE_TASKS
    jobs = []
    for p, problem in enumerate(problems):
        for name, inputs in problem.test_sets:
            exp = expected[p][name]
            wanted = exp.values
            if problem.dataset == "mbpp" and problem.entry_point in not_none:
                wanted = [v is not None for v in wanted]  # as EvalPlus's get_groundtruth(output_not_none=...)
            jobs.append((p, name, inputs, wanted, exp))

    def run(job):
        p, name, inputs, wanted, exp = job
        per_input = time_limits(exp.seconds)
        run_s = run_limit(per_input, rules)
        caps = value_caps(exp.sizes)
        encode_s = harness.encode_limits(exp.encode_seconds)
        watch = harness.SetWatch(len(inputs), per_input, run_s, caps, judge=_judge(problems[p], inputs, wanted, rules),
                                 encode_s=encode_s)
        try:
            preload = harness.preloads(codes[p]) if rules.guard and rules.packages else []
            source = harness.program(codes[p], problems[p].entry_point, inputs, per_input, caps, rules.guard, preload,
                                     encode_s)
        except Exception as exc:
            return SetVerdict(False, f"the code cannot be run ({type(exc).__name__})", "not run")
        result = _run_watched(source, candidate_limits(rules, run_s, encode_s), watch)
        status = result.status if result is not None else "not run"
        if watch.passed():
            return SetVerdict(True, "", status)
        reason = watch.failure or f"stopped after {watch.returned} of {len(inputs)} inputs (sandbox status {status})"
        return SetVerdict(False, reason, status)

    sets: list[dict[str, SetVerdict]] = [{} for _ in problems]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for (p, name, *_), verdict in zip(jobs, pool.map(run, jobs), strict=True):
            sets[p][name] = verdict
    verdicts = []
    for p, code in enumerate(codes):
        names = [n for n, _ in problems[p].test_sets]
        if "plus" in sets[p] and "base" in sets[p] and not sets[p]["base"].passed and sets[p]["plus"].passed:
            sets[p]["plus"] = SetVerdict(False, "base inputs failed", sets[p]["plus"].status)
        verdicts.append(CodeVerdict({n: sets[p][n] for n in names}, code))
    return verdicts


def mbpp_plus_inputs(task_id: str, inputs: list) -> list:
    """MBPP+ inputs with evalplus's own type restoration (tuples, sets, complex numbers)."""
    return evalplus()[1].mbpp_deserialize_inputs(task_id, inputs)


def assert_inputs(asserts: list[str], entry_point: str) -> list[list]:
    """The literal arguments of the first call to `entry_point` (or to `candidate`) in each assert, e.g.
    `assert f(3, [1, 2]) == 5` -> [3, [1, 2]]; ValueError if an assert has no such call."""
    inputs = []
    for text in asserts:
        call = next((node for node in ast.walk(ast.parse(text.strip()))
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                     and node.func.id in (entry_point, "candidate")), None)
        if call is None or call.keywords:
            raise ValueError(f"no call to {entry_point} with positional arguments in {text.strip()!r}")
        try:
            inputs.append([ast.literal_eval(arg) for arg in call.args])
        except ValueError:
            raise ValueError(f"the arguments in {text.strip()!r} are not literals") from None
    return inputs
