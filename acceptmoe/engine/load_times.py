"""Seconds an expert store spends on loads, per MoE layer: `copy_s`, the time the copies took, and `wait_s`,
the time the compute stalled for them (what a fetch-stall share divides by the wall time).

    >>> times = LoadTimes([0, 1])
    >>> times.add_blocked(1, 0.25)                  # CPU: the copy ran inline, the compute thread blocked
    >>> times.totals()
    ({0: 0.0, 1: 0.25}, {0: 0.0, 1: 0.25})

- CPU (`add_blocked`): a load is an indexed copy on the compute thread itself, so the compute stalls for the
  whole copy and the two are one measurement.
- CUDA (`add_events`): the copies run on a side stream. A load records four events: on the compute stream
  one where it reaches the load (before the host reads which experts miss; the stream idles from there) and
  one after it has waited for the copy stream (`main.wait_stream(copy)`): wait_s; on the copy stream one
  before and one after the copies: copy_s.

Events are folded into the sums lazily: a finished load (its last event done; a query never synchronises)
is folded when the next load is added, and at most `MAX_PENDING` loads stay outstanding per store (beyond
that the oldest is waited for), so the events held stay bounded however long a run is. `totals()` folds
what is left (waiting for it) and `reset()` drops everything, unfinished loads included.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

MAX_PENDING = 64       # outstanding CUDA loads per store before the oldest is waited for


class LoadTimes:
    """wait_s and copy_s per layer since the last reset, with the CUDA events not yet folded in."""

    def __init__(self, layers: Iterable[int]):
        self.layers = tuple(layers)
        self.reset()

    def reset(self) -> None:
        self.wait_s = dict.fromkeys(self.layers, 0.0)
        self.copy_s = dict.fromkeys(self.layers, 0.0)
        self.pending: deque = deque()      # (layer, stall_start, stall_end, copy_start, copy_end)

    def add_blocked(self, layer: int, seconds: float) -> None:
        """A load the compute waited for from start to end (host seconds): both its stall and its copy time."""
        self.wait_s[layer] += seconds
        self.copy_s[layer] += seconds

    def add_events(self, layer: int, stall_start, stall_end, copy_start, copy_end) -> None:
        """A CUDA load's timing events (`torch.cuda.Event(enable_timing=True)`, all recorded); folds the
        finished loads in, and waits for the oldest while more than MAX_PENDING are outstanding."""
        self.pending.append((layer, stall_start, stall_end, copy_start, copy_end))
        while self.pending and (len(self.pending) > MAX_PENDING or _finished(self.pending[0])):
            self._fold(self.pending.popleft())

    def totals(self) -> tuple[dict[int, float], dict[int, float]]:
        """(wait_s, copy_s) per layer, every recorded load included (waits for the unfinished ones)."""
        while self.pending:
            self._fold(self.pending.popleft())
        return dict(self.wait_s), dict(self.copy_s)

    def _fold(self, load) -> None:
        layer, stall_start, stall_end, copy_start, copy_end = load
        for event in (copy_end, stall_end):
            event.synchronize()
        self.wait_s[layer] += stall_start.elapsed_time(stall_end) / 1e3        # elapsed_time: milliseconds
        self.copy_s[layer] += copy_start.elapsed_time(copy_end) / 1e3


def _finished(load) -> bool:
    """Whether a load's last events are done (the compute stream resumed after its copies)."""
    return load[2].query() and load[4].query()
