"""`./reproduce.sh sweep`: fixed-budget sweep: AcceptMoE-B accuracy at several budgets beside self-sized AcceptMoE.

The runner, the protocol and the files written are described in `acceptmoe.experiments.perf`."""
from __future__ import annotations

from .perf import command_main

DESCRIPTION = "fixed-budget sweep: AcceptMoE-B accuracy at several budgets beside self-sized AcceptMoE"


def main(argv: list[str] | None = None) -> int:
    return command_main("sweep", DESCRIPTION, argv)


if __name__ == "__main__":
    raise SystemExit(main())
