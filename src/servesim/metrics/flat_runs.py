"""Runs of step-series rows one after another (``FlatRuns``: step times as C doubles, a few
lists of numbers and the pool's phase counts as bytes), for building their columns with numpy
(``metrics.step_arrays``). Compiled with the engine (mypyc, ``setup.py``): each run writes
itself in (``StepRows.flatten_into``, native code over its own fields) as soon as its rows
are final, and the series lets it go. A run keeps its segments' rows laid out as the buffers
keep them (``decode_runs.Run.seg_rows`` and ``phases``), so writing a run in copies a few
lists whole, with no work a row or a segment. A run's step times go in as the bytes
``struct`` packs them into (``FlatRuns.add_durations``): ``array.fromlist`` parses each
float through ``PyArg_Parse``, several times the cost of the packing, for the same doubles.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from array import array
from collections.abc import Callable
from struct import Struct
from typing import Any, Final

SEG_FIELDS = 4  # a segment in ``FlatRuns.segs``: pool size, rows, first step, KV blocks in use before

# ``Struct(f"{n}d").pack`` by n, for runs of up to _MAX_PACKED steps (``struct``'s own cache of
# formats keeps 100 and is emptied when full)
_PACKS: Final[dict[int, Callable[..., bytes]]] = {}
_MAX_PACKED: Final = 4096


class StepRows(metaclass=ABCMeta):
    """Rows of the step series kept compactly (a run of the lazy engine's decode steps,
    ``engine.run_rows.RunRows``, its subclass) until they are final. A class, not a protocol:
    compiled, the series reads its fields and calls its methods natively (an abstract class:
    mypyc keeps a class whose metaclass is ``ABCMeta`` native)."""

    num_rows: int
    replica_id: int

    @abstractmethod
    def write(self, cols: dict[str, list[Any]]) -> None:
        """Append the rows to ``cols`` (the series' columns by name, in ``STEP_COLUMNS``)."""
        raise NotImplementedError

    @abstractmethod
    def flatten_into(self, flat: FlatRuns) -> None:
        """Append what ``step_arrays.rows_to_arrays`` reads of the rows to ``flat``."""
        raise NotImplementedError

    @abstractmethod
    def waiting_s(self, prev_start_s: float) -> float:
        """The sum of ``num_waiting x duration_s`` over the rows, without writing them
        (``prev_start_s``: the start of the row before them)."""
        raise NotImplementedError


class FlatRuns:
    """Runs of rows (``StepRows``) one after another, for ``step_arrays.rows_to_arrays``
    (which reads the same fields as numpy arrays from ``step_arrays.PackedRuns``)."""

    def __init__(self) -> None:
        self.durations: array[float] = array("d")  # every row's
        # ``durations.frombytes``, bound once (compiled, a method called by name is looked up
        # each call)
        self._add_bytes: Callable[[bytes], None] = self.durations.frombytes
        self.start_s: list[float] = []  # per run: its first row's start
        self.num_rows: list[int] = []
        self.replica: list[int] = []
        self.num_waiting: list[int] = []  # at its start
        self.block_size: list[int] = []  # its replica's KV cache's
        self.num_segs: list[int] = []
        self.queued_s: list[float] = []  # requests queued during the runs, run by run
        self.num_queued: list[int] = []  # per run: how many of them
        self.staged_s: list[float] = []  # staged during the runs (async scheduling), run by run
        self.num_staged: list[int] = []
        # per segment, SEG_FIELDS values: pool size, rows, its first step, KV blocks in use
        # before it
        self.segs: list[int] = []
        # per segment, its run's block size's counts: the pool by block phase, as bytes (read
        # by numpy without a conversion once joined), or a list where a count reaches 256
        self.phases: list[bytes | list[int]] = []

    def add_durations(self, durations: list[float]) -> None:
        """Append ``durations`` to ``self.durations`` (the doubles ``fromlist`` would add)."""
        n = len(durations)
        if n == 0:
            return
        pack = _PACKS.get(n)
        if pack is None:
            pack = Struct(f"{n}d").pack
            if n <= _MAX_PACKED:
                _PACKS[n] = pack
        self._add_bytes(pack(*durations))

    def copy(self) -> FlatRuns:
        """A copy, for rows to be added to without changing these."""
        c = FlatRuns()
        c.durations.extend(self.durations)
        c.start_s.extend(self.start_s)
        c.num_rows.extend(self.num_rows)
        c.replica.extend(self.replica)
        c.num_waiting.extend(self.num_waiting)
        c.block_size.extend(self.block_size)
        c.num_segs.extend(self.num_segs)
        c.queued_s.extend(self.queued_s)
        c.num_queued.extend(self.num_queued)
        c.staged_s.extend(self.staged_s)
        c.num_staged.extend(self.num_staged)
        c.segs.extend(self.segs)
        c.phases.extend(self.phases)  # bytes, and lists never changed once added
        return c


def flatten_runs(runs: list[StepRows], flat: FlatRuns | None = None) -> FlatRuns:
    """``runs`` appended to ``flat`` (a new ``FlatRuns`` without it)."""
    if flat is None:
        flat = FlatRuns()
    for r in runs:
        r.flatten_into(flat)
    return flat
