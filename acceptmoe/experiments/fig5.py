"""`./reproduce.sh fig5`: Figure 5: fixed-budget sweep, residency-aware pruning on vs off, fetch-stall share.

The runner, the protocol and the files written are described in `acceptmoe.experiments.perf`."""
from __future__ import annotations

from .perf import command_main

DESCRIPTION = "Figure 5: fixed-budget sweep, residency-aware pruning on vs off, fetch-stall share"


def main(argv: list[str] | None = None) -> int:
    return command_main("fig5", DESCRIPTION, argv)


if __name__ == "__main__":
    raise SystemExit(main())
