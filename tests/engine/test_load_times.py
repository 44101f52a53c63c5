"""`LoadTimes`, the offloaded store's load seconds: the CUDA bookkeeping on stand-in events (a CPU cannot
record CUDA events; `./reproduce.sh gpu-check`, check `pinned`, times real loads), the CPU path in
test_store.py."""
import pytest

from acceptmoe.engine.load_times import MAX_PENDING, LoadTimes


class Event:
    """A timing event at `ms` milliseconds: done at once, or only once waited for."""

    def __init__(self, ms: float, done: bool = True):
        self.ms, self.done, self.waited = ms, done, False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = self.waited = True

    def elapsed_time(self, end: "Event") -> float:
        assert self.done and end.done, "elapsed_time of an unfinished event"
        return end.ms - self.ms


def load(at: float, stall: float, copy: float, done: bool = True) -> tuple:
    """A load's events (stall start, stall end, copy start, copy end): the copy inside the stall."""
    return Event(at), Event(at + stall, done), Event(at + 0.5), Event(at + 0.5 + copy, done)


def test_wait_is_the_stall_and_copy_the_copy_folded_as_loads_finish():
    times = LoadTimes([0, 1])
    times.add_events(0, *load(0.0, stall=3.0, copy=2.0))
    times.add_events(1, *load(10.0, stall=5.0, copy=1.0))
    assert not times.pending                                        # finished loads are folded at once
    times.add_events(0, *load(20.0, stall=1.0, copy=0.5))
    wait, copy = times.totals()
    assert wait == pytest.approx({0: 4e-3, 1: 5e-3}) and copy == pytest.approx({0: 2.5e-3, 1: 1e-3})


def test_outstanding_events_stay_bounded_and_every_load_is_counted():
    """Loads whose events never finish on their own: at most MAX_PENDING stay held (the oldest is waited
    for), and the totals still count every load exactly once."""
    times = LoadTimes([0])
    loads = [load(10.0 * i, stall=2.0, copy=1.0, done=False) for i in range(10 * MAX_PENDING)]
    for events in loads:
        times.add_events(0, *events)
        assert len(times.pending) <= MAX_PENDING
    assert loads[0][1].waited and not loads[-1][1].waited           # only the oldest were waited for
    wait, copy = times.totals()
    assert not times.pending and all(e[1].done for e in loads)
    assert wait[0] == pytest.approx(len(loads) * 2e-3) and copy[0] == pytest.approx(len(loads) * 1e-3)


def test_reset_drops_unfinished_loads_and_the_sums():
    times = LoadTimes([0])
    times.add_blocked(0, 0.5)                                       # CPU: stall and copy are one measurement
    assert times.totals() == ({0: 0.5}, {0: 0.5})
    unfinished = load(0.0, stall=2.0, copy=1.0, done=False)
    times.add_events(0, *unfinished)
    times.reset()
    assert times.totals() == ({0: 0.0}, {0: 0.0}) and not unfinished[1].waited
