"""`./reproduce.sh fig4`: Figure 4 and Table 2: offloaded throughput (X slots per layer, median of 3) and its instrumented counters run.

The runner, the protocol and the files written are described in `acceptmoe.experiments.perf`."""
from __future__ import annotations

from .perf import command_main

DESCRIPTION = "Figure 4 and Table 2: offloaded throughput (X slots per layer, median of 3) and its instrumented counters run"


def main(argv: list[str] | None = None) -> int:
    return command_main("fig4", DESCRIPTION, argv)


if __name__ == "__main__":
    raise SystemExit(main())
