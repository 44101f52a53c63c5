"""`./reproduce.sh fig3`: Figure 3: resident throughput of every method vs Standard SD (paper protocol: 3 repetitions, 256 tokens).

The runner, the protocol and the files written are described in `acceptmoe.experiments.perf`."""
from __future__ import annotations

from .perf import command_main

DESCRIPTION = "Figure 3: resident throughput of every method vs Standard SD (paper protocol: 3 repetitions, 256 tokens)"


def main(argv: list[str] | None = None) -> int:
    return command_main("fig3", DESCRIPTION, argv)


if __name__ == "__main__":
    raise SystemExit(main())
