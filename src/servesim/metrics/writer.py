"""Writing a request's outcome into its row of ``RequestRecords``: the one record writer.

The driver (``servesim.cluster``) hands it each request when it finishes, is rejected or
is still in flight at the end of the run.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from servesim.metrics.records import RequestRecords, RequestStatus
from servesim.metrics.req_status import ReqStatus


class Outcome(Protocol):
    """What the writer reads of a request: ``engine.request.Request`` (a protocol, since
    metrics does not import the engine). Times are seconds, negative for never."""

    @property
    def idx(self) -> int: ...  # its row

    def outcome(self) -> tuple[Any, ...]:
        """(idx, arrival_s, first_scheduled_s, first_token_s, finished_s, num_output_tokens,
        num_cached_tokens, num_preemptions, replica, finished_length, status): one call a
        request (compiled, each field read by name would be a lookup). Typed loosely: the
        values stay the tuple's objects, not converted and boxed again."""
        ...


class RecordWriter:
    """Writes finished requests' records in batches (numpy columns are slow to set one
    element at a time); holds at most ``batch`` requests. ``flush`` before reading."""

    def __init__(self, records: RequestRecords, batch: int = 4096) -> None:
        self.records = records
        self.batch = batch
        self.buf: list[Outcome] = []

    def add(self, r: Outcome, reason: str = "") -> None:
        """Write ``r``'s outcome (read from it at the next ``flush``: its record must be
        final), with ``reason``, when given, saying why it was rejected or is unfinished."""
        if reason:
            self.records.reasons[r.idx] = reason
        self.buf.append(r)
        if len(self.buf) >= self.batch:
            self.flush()

    def flush(self) -> None:
        buf = self.buf
        if not buf:
            return
        self.buf = []
        rec = self.records
        n = len(buf)
        (
            idx_v,
            arrival_s,
            first_scheduled_s,
            first_token_s,
            finished_s,
            num_output_tokens,
            num_cached_tokens,
            num_preemptions,
            replica,
            finished_length,
            status_v,
        ) = zip(*[r.outcome() for r in buf])
        idx = np.fromiter(idx_v, np.int64, n)

        def times(values: tuple[float, ...]) -> np.ndarray:
            a = np.array(values, np.float64)
            a[a < 0] = np.nan
            return a

        rec.arrival_s[idx] = arrival_s  # when sent, for closed-loop clients
        rec.first_scheduled_s[idx] = times(first_scheduled_s)
        rec.first_token_s[idx] = times(first_token_s)
        rec.finished_s[idx] = times(finished_s)
        rec.num_output_tokens[idx] = num_output_tokens
        rec.num_cached_tokens[idx] = np.maximum(np.fromiter(num_cached_tokens, np.int64, n), 0)
        rec.num_preemptions[idx] = num_preemptions
        rec.replica[idx] = replica
        rec.finished_length[idx] = finished_length
        status = np.fromiter(status_v, np.int64, n)  # as record_status, for the batch
        rec.status[idx] = np.where(
            status == ReqStatus.FINISHED,
            RequestStatus.FINISHED,
            np.where(status == ReqStatus.REJECTED, RequestStatus.REJECTED, RequestStatus.UNFINISHED),
        )
