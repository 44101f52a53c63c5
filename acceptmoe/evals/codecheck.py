"""Code grading as EvalPlus grades it, with the verdict decided in the parent process.

One reply to one problem is graded in three steps:
1. Sanitise (`sanitize`): evalplus's own sanitiser keeps the imports, the entry point and the top-level
   definitions it reaches, and drops everything else (`if __name__ == "__main__":` blocks, stray calls,
   prints, tests the model wrote).
2. Run (`run_jobs`): a small trusted harness and the sanitised code run in the sandbox
   (`acceptmoe.evals.sandbox`). The harness loads the code as a module named `candidate` (never
   `__main__`), with stdout and stderr swallowed and stdin empty, then calls the entry point on each test
   input (a deep copy) under a per-input time limit, and writes each return value as plain data
   (`acceptmoe.evals.codec`) on its own result line; it stops at the first exception or time-out.
3. Compare (`compare`): the parent decodes the result lines into built-in values and compares them with
   the expected outputs by EvalPlus's rules (exact match; MBPP's and HumanEval's special oracles; float
   tolerance `atol`, at least 1e-6 when the expected value is a float or a list/tuple of floats, with
   numpy's `allclose(rtol=1e-7)` and the same type and length).

The program never sees the expected outputs, and nothing it prints, patches or exits with is a verdict:
it passes a test set only if the parent receives, for every input, a value equal to the expected one.
The expected outputs come from the canonical solution run through the same harness in the sandbox, and
are cached on disk (`cache_dir()`, readable by the caller only) under a hash of everything they depend on
(harness and codec source, Python version, canonical code, inputs).
Base and plus are separate runs, as in EvalPlus; "plus" passes only when base and plus inputs both pass.

Reused from evalplus 0.3.1 (installed without its dependencies; its light ones are in pyproject.toml):
`evalplus.sanitize.sanitize`; `evalplus.eval.is_floats` and the special oracles of
`evalplus.eval._special_oracle`; `evalplus.data.mbpp.mbpp_deserialize_inputs`; the time-limit constants of
`evalplus.config` (per input: max(1 s, 4 x the canonical solution's time on this machine); per run: twice
their sum plus 10 s for loading and encoding the values, at most `limits.timeout_s`, 600 s by default,
where EvalPlus caps a run at 60 s: a few MBPP+ inputs take their canonical solution many seconds on a
small machine). Memory: 4 GiB, as EvalPlus. The comparison of `evalplus.eval.unsafe_execute` is restated in `compare` because there it runs inside the
untrusted process; tests check both against evalplus's own `untrusted_check`. One deliberate difference:
evalplus 0.3.1 fails every find_zero (HumanEval/32) solution, its canonical one included (a `continue`
after its |poly(xs, x)| <= atol check skips recording the pass; evalplus/evalplus#201); `compare` passes an
input when that check holds, as intended. Values too large to send (`codec.MAX_WEIGHT`) are compared by
digest, i.e. exact match without float tolerance or oracles.

Not defended here: reading files the sandbox leaves readable. A program that finds this repository's
data files could run a canonical solution instead of its own; keeping them out of reach is the sandbox's
file isolation (see `acceptmoe.evals.sandbox`).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from acceptmoe.errors import UserError
from acceptmoe.evals import codec
from acceptmoe.evals.sandbox import ExecResult, Limits, run_many

EVALPLUS_VERSION = "0.3.1"
CACHE_ENV = "ACCEPTMOE_CACHE_DIR"
RESULT_MARK = "@@acceptmoe-result "
DATASETS = ("humaneval", "mbpp", "plain")  # whose oracle rules apply; "plain": exact match and float tolerance
CANONICAL_LIMITS = Limits(timeout_s=1200.0, memory_mb=4096, file_mb=256, output_chars=1 << 30)
CANDIDATE_LIMITS = Limits(timeout_s=600.0, memory_mb=4096, file_mb=256, output_chars=1 << 30)


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
    """evalplus's sanitiser: imports, `entry_point` and the definitions it reaches (its cost grows with the
    cube of the number of lines, so pass the extracted code, not a whole chatty reply)."""
    return evalplus()[4].sanitize(code, entry_point)


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
class SetRun:
    """What came back from one run of the harness: the return values in input order (as many as were
    received), the seconds per call, and why the run stopped early (None if every input returned)."""

    values: list
    seconds: list
    failure: str | None
    status: str  # the sandbox's status of the harness process


@dataclass(frozen=True)
class SetVerdict:
    passed: bool
    reason: str  # "" when passed; else what failed first
    status: str


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


# ----------------------------------------------------------------------------------------------------
# The harness: codec source + a runner; its only output channel the parent reads is RESULT_MARK lines.

_RUNNER = r'''
import copy as _copy, io as _io, os as _os, signal as _signal, sys as _sys, time as _time, types as _types
_write = _os.write
def _emit(record):
    _write(1, ("\n%s%s\n" % (_MARK, json.dumps(record, separators=(",", ":"), allow_nan=False))).encode())
class _TimeLimit(BaseException):
    pass
def _alarm(signum, frame):
    raise _TimeLimit("time limit")
def _name(exc):
    try:
        return str(type(exc).__name__)[:100]
    except BaseException:
        return "?"
def _run(code, entry_point, inputs, limits):
    _signal.signal(_signal.SIGALRM, _alarm)
    _sys.stdout = _sys.stderr = open(_os.devnull, "w")
    _sys.stdin = _io.StringIO()
    module = _types.ModuleType("candidate")
    _sys.modules["candidate"] = module
    try:
        exec(compile(code, "<candidate>", "exec"), module.__dict__)
        fn = module.__dict__[entry_point]
    except BaseException as exc:
        _emit({"load_error": _name(exc)})
        return
    for i, args in enumerate(inputs):
        args = _copy.deepcopy(args)
        start = _time.perf_counter()
        try:
            _signal.setitimer(_signal.ITIMER_REAL, limits[i])
            out = fn(*args)
            _signal.setitimer(_signal.ITIMER_REAL, 0)
        except BaseException as exc:
            _signal.setitimer(_signal.ITIMER_REAL, 0)
            _emit({"i": i, "error": _name(exc)})
            return
        seconds = _time.perf_counter() - start
        _emit({"i": i, "value": encode_result(out), "seconds": seconds})
    _emit({"done": len(inputs)})
'''


def _harness() -> str:
    return f"{Path(codec.__file__).read_text()}\n_MARK = {RESULT_MARK!r}\n{_RUNNER}\n"


def harness_program(code: str, entry_point: str, inputs: list, limits_s: list[float]) -> str:
    """The sandboxed program: codec, runner, then the call on the embedded code and inputs."""
    args = ", ".join([repr(code), repr(entry_point), f"decode(json.loads({codec.dumps(inputs)!r}))",
                      repr([float(s) for s in limits_s])])
    return f"{_harness()}_run({args})\n"


def read_results(result: ExecResult, n_inputs: int) -> SetRun:
    """The harness's result lines, checked: values for inputs 0, 1, ... in order, each once, then "done";
    an exception, a time-out or anything malformed ends the list with a failure reason."""
    values, seconds, failure, done = [], [], None, False
    for line in result.stdout.split("\n"):
        if not line.startswith(RESULT_MARK):
            continue
        try:
            record = json.loads(line[len(RESULT_MARK):])
        except ValueError:
            return SetRun(values, seconds, "malformed result line", result.status)
        if failure is not None or done or not isinstance(record, dict):
            return SetRun(values, seconds, "unexpected result line", result.status)
        if "load_error" in record:
            failure = f"loading the code raised {record['load_error']}"
        elif "done" in record:
            done = record["done"] == n_inputs == len(values)
            if not done:
                return SetRun(values, seconds, "result lines do not cover every input", result.status)
        elif record.get("i") != len(values):
            return SetRun(values, seconds, "result lines out of order", result.status)
        elif "error" in record:
            failure = f"input {len(values)} raised {record['error']}"
        else:
            try:
                values.append(codec.decode(record["value"]))
                seconds.append(float(record["seconds"]))
            except (KeyError, TypeError, ValueError, RecursionError):
                return SetRun(values, seconds, "undecodable result value", result.status)
    if failure is None and not done:
        failure = f"stopped after {len(values)} of {n_inputs} inputs (sandbox status {result.status})"
    return SetRun(values, seconds, failure, result.status)


@dataclass(frozen=True)
class Job:
    program: str
    limits: Limits
    n_inputs: int


def run_jobs(jobs: list[Job], workers: int) -> list[SetRun]:
    """Run harness programs in the sandbox, `workers` at a time (each with its own time limit)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda job: run_many([job.program], job.limits, 1)[0], jobs))
    return [read_results(res, job.n_inputs) for res, job in zip(results, jobs)]


# ----------------------------------------------------------------------------------------------------
# Expected outputs: the canonical solution in the same harness, cached on disk.

def cache_dir() -> Path:
    """$ACCEPTMOE_CACHE_DIR/expected-outputs, else ~/.cache/acceptmoe/expected-outputs (mode 0700)."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "acceptmoe")
    path = Path(root) / "expected-outputs"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _cache_key(problem: CodeProblem, name: str, inputs: list) -> str:
    blob = json.dumps([_harness(), list(sys.version_info[:2]), problem.canonical, problem.entry_point,
                       name, codec.encode(inputs)], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Expected:
    values: list
    seconds: list


def _load_cached(path: Path) -> Expected | None:
    try:
        data = json.loads(path.read_text())
        return Expected([codec.decode(v) for v in data["values"]], [float(s) for s in data["seconds"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store(path: Path, expected: Expected) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump({"values": [codec.encode_result(v) for v in expected.values], "seconds": expected.seconds}, fh,
                  separators=(",", ":"), allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class CanonicalFailed(RuntimeError):
    """The reference solution did not return on every input (a data or machine problem, not a verdict)."""


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
    if missing:
        jobs = [Job(harness_program(problems[p].canonical, problems[p].entry_point, inputs,
                                    [CANONICAL_LIMITS.timeout_s] * len(inputs)), CANONICAL_LIMITS, len(inputs))
                for p, name, inputs, _ in missing]
        for (p, name, inputs, path), run in zip(missing, run_jobs(jobs, workers)):
            if run.failure is not None:
                raise CanonicalFailed(f"{problems[p].task_id} ({name}): the canonical solution failed: {run.failure}")
            found[p][name] = Expected(run.values, run.seconds)
            _store(path, found[p][name])
    return found


# ----------------------------------------------------------------------------------------------------
# Comparison, as evalplus.eval.unsafe_execute (evalplus 0.3.1) does it, on decoded plain values.

def compare(dataset: str, entry_point: str, inputs: list, outputs: list, expected: list, atol: float) -> list[bool]:
    """Per-input verdicts of `outputs` against `expected` by EvalPlus's rules. Like EvalPlus, a float
    expectation raises `atol` from 0 to 1e-6 for that input and every later one."""
    _, _, evaluation, oracle, _ = evalplus()
    verdicts = []
    for inp, out, exp in zip(inputs, outputs, expected):
        try:
            exact_match = out == exp
            if dataset == "mbpp":
                if entry_point == "are_equivalent":  # Mbpp/164
                    exact_match = True
                elif entry_point == "sum_div":  # Mbpp/295
                    exact_match = exact_match or out == 0
                elif entry_point == "surface_Area":  # Mbpp/581
                    exact_match = exact_match or abs(out - oracle._surface_Area(*inp)) <= atol
                elif entry_point == "digit_distance_nums":  # Mbpp/558
                    exact_match = exact_match or out == oracle._digit_distance_nums(*inp)
                elif entry_point in oracle.MBPP_OUTPUT_SET_EQ_TASKS:
                    exact_match = set(out) == set(exp)
                elif entry_point in oracle.MBPP_OUTPUT_NOT_NONE_TASKS:
                    exact_match = out == exp if isinstance(out, bool) else exp == (out is not None)
            if dataset == "humaneval" and entry_point == "find_zero":  # HumanEval/32
                verdicts.append(bool(abs(oracle._poly(*inp, out)) <= atol))
                continue
            if atol == 0 and evaluation.is_floats(exp):
                atol = 1e-6
            if not exact_match and atol != 0:
                ok = type(out) == type(exp)
                if ok and isinstance(exp, (list, tuple)):
                    ok = len(out) == len(exp)
                verdicts.append(bool(ok and np.allclose(out, exp, rtol=1e-07, atol=atol)))
            else:
                verdicts.append(bool(exact_match))
        except Exception:
            verdicts.append(False)
    return verdicts


def time_limits(reference_seconds: list[float]) -> list[float]:
    """EvalPlus's per-input limits: max(DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR x reference)."""
    config = evalplus()[0]
    return [max(config.DEFAULT_MIN_TIME_LIMIT, config.DEFAULT_GT_TIME_LIMIT_FACTOR * t) for t in reference_seconds]


def _judge(problem: CodeProblem, inputs: list, expected: Expected, run: SetRun) -> tuple[bool, str]:
    if run.failure is not None or len(run.values) != len(inputs):
        return False, run.failure or "missing results"
    wanted = expected.values
    if problem.dataset == "mbpp" and problem.entry_point in evalplus()[3].MBPP_OUTPUT_NOT_NONE_TASKS:
        wanted = [v is not None for v in wanted]  # as EvalPlus's get_groundtruth(output_not_none=...)
    verdicts = compare(problem.dataset, problem.entry_point, inputs, run.values, wanted, problem.atol)
    if not all(verdicts):
        first = verdicts.index(False)
        return False, f"input {first}: got {run.values[first]!r:.200}, expected {wanted[first]!r:.200}"
    return True, ""


def grade_many(problems: list[CodeProblem], codes: list[str], workers: int = 2,
               limits: Limits = CANDIDATE_LIMITS) -> list[CodeVerdict]:
    """Grade sanitised `codes[i]` on `problems[i]`: every test set runs in its own sandboxed process."""
    if len(problems) != len(codes):
        raise ValueError(f"{len(problems)} problems but {len(codes)} codes")
    expected = expected_outputs(problems, workers)
    jobs, index = [], []
    for p, (problem, code) in enumerate(zip(problems, codes)):
        for name, inputs in problem.test_sets:
            per_input = time_limits(expected[p][name].seconds)
            run_limits = replace(limits, timeout_s=min(limits.timeout_s, 2 * sum(per_input) + 10.0), cpu_s=None)
            jobs.append(Job(harness_program(code, problem.entry_point, inputs, per_input), run_limits, len(inputs)))
            index.append((p, name, inputs))
    sets: list[dict[str, SetVerdict]] = [{} for _ in problems]
    for (p, name, inputs), run in zip(index, run_jobs(jobs, workers)):
        passed, reason = _judge(problems[p], inputs, expected[p][name], run)
        sets[p][name] = SetVerdict(passed, reason, run.status)
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
