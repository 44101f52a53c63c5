"""`./reproduce.sh table2`: Table 2: offloading traffic per token, hit rate and stall share from one instrumented run.

The runner, the protocol and the files written are described in `acceptmoe.experiments.perf`."""
from __future__ import annotations

from .perf import command_main

DESCRIPTION = "Table 2: offloading traffic per token, hit rate and stall share from one instrumented run"


def main(argv: list[str] | None = None) -> int:
    return command_main("table2", DESCRIPTION, argv)


if __name__ == "__main__":
    raise SystemExit(main())
