"""`./reproduce.sh claims`: the paper's claims beside this reproduction, from saved run folders only.

    ./reproduce.sh claims                                  # the newest run of each experiment in results/reference/
    ./reproduce.sh claims --run results/reference/table1/<run> --run results/fig3/tiny/<run> [--out DIR]
"""
from __future__ import annotations

from pathlib import Path

from acceptmoe.commands import command, parser

from ..spine.runs import REPO
from .table import default_runs, write_claims


@command("claims", "the paper's claims beside this reproduction (ours with intervals, direction, what was "
                   "measured), from saved runs only")
def main(argv: list[str] | None = None) -> int:
    p = parser("claims")
    p.add_argument("--run", type=Path, action="append", default=None, metavar="RUN_DIR",
                   help="a run folder to read (repeatable; default: the newest run of each experiment under "
                        "results/reference/)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "claims",
                   help="where claims.md, claims.csv and claims.tex go (default: results/claims/)")
    args = p.parse_args(argv)
    runs = args.run if args.run else default_runs()
    text = write_claims(runs, args.out)
    print(text)
    print("written: " + ", ".join(str(args.out / name) for name in ("claims.md", "claims.csv", "claims.tex")))
    return 0
