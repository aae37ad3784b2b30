"""The per-step arithmetic of ``KernelPerfModel``, kept apart so that mypyc compiles it.

``KernelPerfModel`` (``perf/kernel_model.py``) builds the tables from the kernel database;
this class only reads them: the per-token-count and per-request-count seconds, and one
(log length, log seconds) attention row per batch size, made on first use by the model's
callbacks. Plain lists, floats and ``bisect``: compiled (``setup.py``) it runs as C and is
called from the compiled engine without an interpreted frame per step; as Python it
computes the same.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from math import exp, log

from servesim.perf.base import BatchStats

#: (log length, log seconds of all layers' attention) at one batch size.
Row = tuple[list[float], list[float]]


def past_onset(total: float, hot: float, onset_s: float) -> float:
    """Seconds a step of ``total`` seconds at full clocks (``hot`` at sustained ones) gains
    when everything past its first ``onset_s`` runs at the sustained clocks."""
    return (total - onset_s) / total * (hot - total) if total > onset_s and hot > total else 0.0


def row_time(row: Row, x: float) -> float:
    """Seconds at log length ``x``: linear in log-log between the row's points, clamped at
    its ends (which the model extends far past any real length)."""
    return row_time_at(row, x, bisect_right(row[0], x))


def row_time_at(row: Row, x: float, i: int) -> float:
    """``row_time(row, x)`` given ``i = bisect_right(row[0], x)`` (a run of decode steps
    keeps ``i`` as its context grows instead of searching every step)."""
    xs, ys = row
    if i <= 0:
        return exp(ys[0])
    if i >= len(xs):
        return exp(ys[-1])
    return exp(ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1]))


class KernelStepTime:
    """``batch_time`` of whole-count ``BatchStats`` from the model's tables."""

    tok: list[float]
    req: list[float]
    dec_rows: dict[int, Row]
    pf_rows: dict[int, Row]
    grow_tokens: Callable[[int], list[float]]
    grow_requests: Callable[[int], list[float]]
    prefill_row: Callable[[int], Row]
    decode_row: Callable[[int], Row]
    # Launch costs per step by CUDA-graph mode: steps of at most graph_max tokens replay a
    # graph (full for pure decodes, piecewise otherwise; the tables hold their padded time).
    graph_max: int
    mixed_max: int  # the largest step holding a prefill that replays a graph (0: FULL_DECODE_ONLY)
    c_full: float
    c_piece: float
    c_eager: float
    # Host floor of a step run without CUDA graphs (t > graph_max, or a step holding a prefill
    # above mixed_max): the CPU launches every
    # kernel of every layer itself, and the step cannot end before it has (0: no floor).
    eager_floor: float
    # The same tables at the GPU's sustained clocks (``perf.sustained``; None: full clocks
    # throughout): a step holding a prefill whose time exceeds ``onset_s`` runs the rest of
    # it at those clocks.
    hot: KernelStepTime | None
    onset_s: float

    def __init__(
        self,
        tok: list[float],
        req: list[float],
        grow_tokens: Callable[[int], list[float]],
        grow_requests: Callable[[int], list[float]],
        prefill_row: Callable[[int], Row],
        decode_row: Callable[[int], Row],
    ) -> None:
        """``grow_*(n)``: the table for at least counts 0..n; ``*_row(b)``: the row at batch b."""
        self.tok = tok
        self.req = req
        self.grow_tokens = grow_tokens
        self.grow_requests = grow_requests
        self.prefill_row = prefill_row
        self.decode_row = decode_row
        self.dec_rows = {}
        self.pf_rows = {}
        self.graph_max = 0
        self.mixed_max = 0
        self.c_full = self.c_piece = self.c_eager = 0.0
        self.eager_floor = 0.0
        self.hot = None
        self.onset_s = float("inf")

    def batch_time(self, stats: BatchStats) -> float:
        """Seconds of one iteration: the GPU's (``gpu_time``), its part past ``onset_s`` at
        sustained clocks if it holds a prefill, and at least the host's floor when it runs
        without CUDA graphs."""
        total = self.gpu_time(stats)
        pt = stats.num_prefill_tokens
        if pt and total > self.onset_s and self.hot is not None:
            total += past_onset(total, self.hot.gpu_time(stats), self.onset_s)
        if total < self.eager_floor and pt + stats.num_decode_reqs > (
            self.mixed_max if pt else self.graph_max
        ):
            return self.eager_floor
        return total

    def gpu_time(self, stats: BatchStats) -> float:
        """Seconds of one iteration's kernels and launches at full clocks: per-T and
        per-request terms plus two attention lookups."""
        d = stats.num_decode_reqs
        pt = stats.num_prefill_tokens
        t = pt + d
        if t == 0:
            return 0.0
        r = stats.num_prefill_reqs + d
        if t >= len(self.tok):
            self.tok = self.grow_tokens(t)
        if r >= len(self.req):
            self.req = self.grow_requests(r)
        total = self.tok[t] + self.req[r]
        graphed = t <= (self.mixed_max if pt else self.graph_max)
        if graphed:
            total += self.c_piece if pt else self.c_full
        else:
            total += self.c_eager
        if pt:
            pr = stats.num_prefill_reqs
            row = self.pf_rows.get(pr)
            if row is None:
                row = self.prefill_row(pr)
                self.pf_rows[pr] = row
            # The equal-work length s: pr x s^2 / 2 = prefill_attn_work.
            total += row_time(row, 0.5 * log(2.0 * stats.prefill_attn_work / pr))
        if d:
            total += row_time(self.decode(d), log(stats.sum_decode_context / d))
        return total

    def decode_terms(self, d: int) -> tuple[float, Row]:
        """(rest, row): a pure-decode step of ``d`` requests at context sum ``s`` takes
        ``rest + row_time(row, log(s / d))`` seconds, the same sums as ``batch_time``'s."""
        if d >= len(self.tok):
            self.tok = self.grow_tokens(d)
        if d >= len(self.req):
            self.req = self.grow_requests(d)
        rest = self.tok[d] + self.req[d]
        rest += self.c_full if d <= self.graph_max else self.c_eager
        return rest, self.decode(d)

    def decode(self, d: int) -> Row:
        """The decode-attention row at batch ``d``."""
        row = self.dec_rows.get(d)
        if row is None:
            row = self.decode_row(d)
            self.dec_rows[d] = row
        return row
