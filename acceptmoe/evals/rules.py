"""The rules code replies are graded by: EvalPlus 0.3.1's, with every deviation an explicit option.

`CodeRules()` is the default: EvalPlus's rules except the find_zero fix. EvalPlus's rules, as
`evalplus.codegen` and `evalplus.evaluate` apply them to a chat model's reply:
- reading (`codecheck.evalplus_code`): the whole reply through `evalplus.sanitize.sanitize(reply,
  entry_point)` (its longest syntactically valid span of lines, then the imports, the entry point and the
  definitions it reaches), as its codegen reads a chat model's reply or a whole solution; a reply whose
  sanitised code defines no entry point (a base model's body-only completion) after the prompt, as
  EvalPlus reads a completion (`prompt + completion`);
- running: the sanitised code executed after `evalplus.eval.utils.reliability_guard` (no `open`, `exit`,
  `os.kill`, `os.system`, `os.fork`, `subprocess.Popen`, file removal, ...), with the installed
  packages importable (those the code imports that evalplus's own process has loaded imported before the
  guard, as there), threads allowed, 4 GiB of address space, stdout, stderr and stdin
  swallowed (`swallow_io`), no per-input deep copy;
- time: per input max(DEFAULT_MIN_TIME_LIMIT, DEFAULT_GT_TIME_LIMIT_FACTOR x the canonical solution's
  time), per run min(60 s, the sum of those) + 2 s;
- comparing: `out == exp`, the special oracles of `evalplus.eval._special_oracle`, float tolerance
  (`atol`, raised to 1e-6 for float expectations, `np.allclose(rtol=1e-7)` with the same type and length).

Deviations: `find_zero_fix` (on by default: evalplus 0.3.1 fails every find_zero solution, its canonical one
included, evalplus/evalplus#201); `reading="first-block"` (the first fenced Python block that defines the
entry point, after the HumanEval prompt); `run_cap_s` other than 60; `guard=False`; `packages=False`;
`threads` other than THREADS. Deviations that are not options, because the verdict is decided outside the
program: return values are compared as data (a subclass's own `__eq__` never runs; a value that is not data
`codec` knows equals nothing), the oracles see the inputs as given (not as the program left them), a
value whose encoding exceeds its cap (`codec.VALUE_CAP`, or twice the expected one's plus 64 KiB) is
compared by digest (exact match only), each time limit is measured by the grader (a program that ignores
SIGALRM still stops) and covers the encoding of its value (within an allowance from the canonical value's,
`harness.encode_limits`) and its finaliser, the program ends within `harness.EXIT_S` of its last value, the
installed packages a program can import are `confine.SOLUTION_DISTRIBUTIONS` only (numpy; no evaluation
package, whose files hold solutions), without a memory cgroup a program is one process (its threads
allowed), and the sanitiser has a time limit (`sanitize_s`; EvalPlus has none).
`record()` is what a graded row stores.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

EVALPLUS_VERSION = "0.3.1"
READINGS = ("evalplus", "first-block")
THREADS = 64        # threads a program may start (EvalPlus: as many as the machine allows)
EVALPLUS_RUN_CAP_S = 60.0


@dataclass(frozen=True)
class CodeRules:
    find_zero_fix: bool = True
    reading: str = "evalplus"
    run_cap_s: float = EVALPLUS_RUN_CAP_S
    guard: bool = True
    packages: bool = True
    threads: int = THREADS
    sanitize_s: float = 60.0
    memory_mb: int = 4096

    def __post_init__(self):
        if self.reading not in READINGS:
            raise ValueError(f"unknown reading {self.reading!r}; valid: {', '.join(READINGS)}")
        if self.run_cap_s <= 0 or self.sanitize_s <= 0 or self.threads < 0 or self.memory_mb < 64:
            raise ValueError(f"run_cap_s and sanitize_s must be > 0, threads >= 0, memory_mb >= 64: {self}")

    def deviations(self) -> list[str]:
        """The options in force that differ from EvalPlus 0.3.1 (find_zero_fix included when on)."""
        return [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                if getattr(self, f.name) != getattr(EVALPLUS, f.name)]

    def record(self) -> str:
        """One line for a graded row: the rules and their deviations from EvalPlus."""
        found = self.deviations()
        return f"evalplus {EVALPLUS_VERSION}" + (f"; deviations: {', '.join(found)}" if found else "")


EVALPLUS = CodeRules(find_zero_fix=False)   # EvalPlus's rules exactly (its find_zero defect included)
DEFAULT = CodeRules()
