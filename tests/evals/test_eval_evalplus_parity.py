"""Parity with evalplus 0.3.1's own code on HumanEval+ and MBPP+ problems that exercise its special rules
(float tolerance, find_zero, set equality, "not None" outputs, complex inputs, inf outputs):
- the expected outputs we compute in the sandbox equal evalplus's `trusted_exec` of the canonical solution;
- our base and plus verdicts equal evalplus's `untrusted_check` on the same candidate programs, except on
  find_zero (HumanEval/32), where evalplus 0.3.1 fails every solution, its canonical one included (after
  its |poly(x)| <= atol check a `continue` skips recording the pass; evalplus/evalplus#201): we apply that
  check as intended."""
import evalplus.eval as evalplus_eval
import pytest
from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS, MBPP_OUTPUT_SET_EQ_TASKS
from evalplus.gen.util import trusted_exec

from acceptmoe.evals.codecheck import expected_outputs, grade_many
from acceptmoe.evals.tasks import get_task

PROBLEMS = {"humaneval": ["HumanEval/0", "HumanEval/2", "HumanEval/32"],
            "mbpp": ["Mbpp/2", "Mbpp/124", "Mbpp/137", "Mbpp/558", "Mbpp/581", "Mbpp/737"]}
# Candidates: the canonical function renamed to _ref, wrapped by the entry point with a change of output.
CHANGES = {
    "same": "out",
    "float +1e-7": "out + 1e-7 if type(out) is float else out",
    "float +1e-3": "out + 1e-3 if type(out) is float else out",
    "tuple as list": "list(out) if type(out) is tuple else out",
    "tuple reversed": "tuple(reversed(out)) if type(out) is tuple else out",
    "truth value": "bool(out)",
    "None": "None",
}


def _problems():
    out = []
    for task_name, ids in PROBLEMS.items():
        task = get_task(task_name)
        for ex in task.load():
            if ex["id"] in ids:
                out.append((task_name, task.problem(ex)))
    assert len(out) == sum(map(len, PROBLEMS.values()))
    return out


def _candidate(problem, change):
    ep = problem.entry_point
    ref = problem.canonical.replace(f"def {ep}(", "def _ref(", 1)
    return f"{ref}\n\ndef {ep}(*args):\n    out = _ref(*args)\n    return {CHANGES[change]}\n"


@pytest.fixture(scope="module")
def cases():
    problems = _problems()
    expected = expected_outputs([p for _, p in problems])
    return problems, expected


def test_expected_outputs_equal_evalplus_trusted_exec(cases):
    problems, expected = cases
    for (dataset, problem), exp in zip(problems, expected):
        not_none = dataset == "mbpp" and problem.entry_point in MBPP_OUTPUT_NOT_NONE_TASKS
        for name, inputs in problem.test_sets:
            theirs = trusted_exec(problem.canonical, inputs, problem.entry_point, output_not_none=not_none)
            ours = [v is not None for v in exp[name].values] if not_none else exp[name].values
            if dataset == "mbpp" and problem.entry_point in MBPP_OUTPUT_SET_EQ_TASKS:  # order follows str hashing,
                ours, theirs = [set(v) for v in ours], [set(v) for v in theirs]  # which differs per process
            assert ours == theirs, (problem.task_id, name)


def test_verdicts_equal_evalplus_untrusted_check(cases):
    problems, expected = cases
    jobs = [(dataset, problem, exp, change) for (dataset, problem), exp in zip(problems, expected) for change in CHANGES]
    ours = grade_many([p for _, p, _, _ in jobs], [_candidate(p, c) for _, p, _, c in jobs])
    mismatches, outcomes, find_zero = [], set(), {}
    for (dataset, problem, exp, change), verdict in zip(jobs, ours):
        not_none = dataset == "mbpp" and problem.entry_point in MBPP_OUTPUT_NOT_NONE_TASKS
        theirs = {}
        for name, inputs in problem.test_sets:
            values = [v is not None for v in exp[name].values] if not_none else exp[name].values
            stat, _ = evalplus_eval.untrusted_check(dataset, _candidate(problem, change), inputs, problem.entry_point,
                                                    values, problem.atol, exp[name].seconds, fast_check=True)
            theirs[name] = stat == evalplus_eval.PASS
        theirs["plus"] = theirs["base"] and theirs["plus"]  # EvalPlus: plus = base and plus inputs pass
        mine = {"base": verdict.passed("base"), "plus": verdict.passed("plus")}
        outcomes.add((mine["base"], mine["plus"]))
        if problem.entry_point == "find_zero":
            assert theirs == {"base": False, "plus": False}  # evalplus 0.3.1's known defect
            find_zero[change] = mine["plus"]
        elif mine != theirs:
            mismatches.append((problem.task_id, change, mine, theirs, verdict.sets["base"].reason))
    assert mismatches == []
    assert find_zero["same"] and not find_zero["None"] and not find_zero["truth value"] and not find_zero["float +1e-3"]
    assert {(True, True), (False, False)} <= outcomes  # the cases do separate passing from failing
