"""Benchmark: grading overhead of the code sandbox per program, with the isolation this machine gives.

Runs a trivial passing program through `sandbox.run_many` one at a time (median wall time of a whole
call: process setup, namespaces, limits, the run, teardown) and a batch on `--workers` workers
(wall time / programs). Prints the isolation in force, so numbers are read with what they bought.

    ./reproduce.sh bench-sandbox [--repeats 60 --batch 40 --workers 2]
"""
from __future__ import annotations

import statistics
import time

from acceptmoe.commands import command, parser
from acceptmoe.evals.sandbox import Limits, isolation, run_many

PROGRAM = "def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n"


@command("bench-sandbox", "grading overhead of the code sandbox per program (one at a time and in a batch)")
def main(argv: list[str] | None = None) -> int:
    p = parser("bench-sandbox")
    p.add_argument("--repeats", type=int, default=60, help="single-program calls timed")
    p.add_argument("--batch", type=int, default=40, help="programs in the batch run")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    print(f"isolation: {isolation().describe()}")
    limits = Limits()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        (res,) = run_many([PROGRAM], limits, workers=1)
        times.append(time.perf_counter() - start)
        assert res.passed, res
    print(f"one program per call: median {statistics.median(times) * 1e3:.1f} ms, "
          f"min {min(times) * 1e3:.1f} ms over {args.repeats} calls")
    start = time.perf_counter()
    results = run_many([PROGRAM] * args.batch, limits, workers=args.workers)
    wall = time.perf_counter() - start
    assert all(r.passed for r in results)
    print(f"batch of {args.batch} on {args.workers} workers: {wall:.2f} s, {wall / args.batch * 1e3:.1f} ms per program")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
