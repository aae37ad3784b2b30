"""The progress bar of a long run, shared by one replica and a cluster.

Shown on stderr, only on a terminal and once a run passes 1 s; the run calls ``report``
between slices of simulated time (``run_in_slices``), never in its hot loop.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol


@contextmanager
def progress_bar(enabled: bool, total: int, t0: float) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr, shown only on a terminal and once a run passes 1 s."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress(
        "simulating",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("requests", total=total)
    started = False

    def report(done: int) -> None:
        nonlocal started
        if not started and time.perf_counter() - t0 > 1.0:
            bar.start()
            started = True
        if started:
            bar.update(task, completed=done)

    try:
        yield report
    finally:
        if started:
            bar.stop()


class SteppedLoop(Protocol):
    """What ``run_in_slices`` drives: ``engine.events.EventLoop`` (a protocol, since the
    engine imports this module and not the reverse)."""

    now: float  # seconds: the time of the event being handled

    def __len__(self) -> int: ...  # events pending
    def next_time(self) -> float: ...  # the time of the next event
    def run(self, until: float = ...) -> float: ...  # handle events up to ``until``


def run_in_slices(
    loop: SteppedLoop,
    horizon_s: float,
    until_s: float,
    progress: Callable[[int], None] | None,
    num_done: Callable[[], int],
    grows: bool = False,
) -> float:
    """Run ``loop`` (an ``engine.events.EventLoop``) to ``until_s``; with ``progress``, in
    about 200 slices of the arrival horizon, calling ``progress(num_done())`` after each
    (no cost in the hot loop). ``grows``: the horizon is not known ahead (closed-loop
    clients send as requests finish), so slices grow with the clock. Returns the time of
    the last event."""
    with gc_paused():
        return _run(loop, horizon_s, until_s, progress, num_done, grows)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the event loop (restored after, as it was).

    The loop allocates millions of short-lived container objects (step outputs, lists,
    requests) and few reference cycles (a few hundred on the Azure hour's 19,366 requests),
    so the collector's passes, every 700 allocations, cost about a tenth of the run and
    free next to nothing; memory is still freed by reference counting, and the cycles
    the loop leaves are collected once the collector is back on.

    Turned back on, the collector's first pass would scan every object the loop left
    alive (the requests, their records, the step series: a tenth of the run again), all
    in its youngest generation. They move to the oldest generation unscanned instead
    (``gc.freeze`` then ``gc.unfreeze``, which merges the frozen objects into it), where
    the next full collection, on the collector's usual schedule, sees them like any other
    long-lived data. Skipped where the process has frozen objects of its own (a fork
    server's ``gc.freeze``), which unfreezing would release."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def _run(
    loop: SteppedLoop,
    horizon_s: float,
    until_s: float,
    progress: Callable[[int], None] | None,
    num_done: Callable[[], int],
    grows: bool,
) -> float:
    if progress is None:
        return float(loop.run(until_s))
    dt = max(horizon_s / 200, 1e-3)
    t = 0.0
    while len(loop) and loop.now < until_s:
        if grows:
            dt = max(dt, loop.now / 200)
        t = max(t + dt, loop.next_time())
        loop.run(min(t, until_s))
        progress(num_done())
    return float(loop.now)
