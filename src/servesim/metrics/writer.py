"""Writing a request's outcome into its row of ``RequestRecords``: the one record writer.

The driver (``servesim.cluster``) hands it each request when it finishes, is rejected or
is still in flight at the end of the run.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from servesim.metrics.records import RequestRecords, RequestStatus
from servesim.metrics.req_status import ReqStatus


class Outcome(Protocol):
    """What the writer reads of a request: ``engine.request.Request`` (a protocol, since
    metrics does not import the engine). Times are seconds, negative for never."""

    @property
    def idx(self) -> int: ...  # its row
    @property
    def arrival_s(self) -> float: ...
    @property
    def first_scheduled_s(self) -> float: ...
    @property
    def first_token_s(self) -> float: ...
    @property
    def finished_s(self) -> float: ...
    @property
    def num_output_tokens(self) -> int: ...
    @property
    def num_cached_tokens(self) -> int: ...
    @property
    def num_preemptions(self) -> int: ...
    @property
    def replica(self) -> int: ...
    @property
    def finished_length(self) -> bool: ...
    @property
    def status(self) -> ReqStatus: ...


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
        idx = np.fromiter([r.idx for r in buf], np.int64, n)

        def times(values: list[float]) -> np.ndarray:
            a = np.array(values, np.float64)
            a[a < 0] = np.nan
            return a

        rec.arrival_s[idx] = [r.arrival_s for r in buf]  # when sent, for closed-loop clients
        rec.first_scheduled_s[idx] = times([r.first_scheduled_s for r in buf])
        rec.first_token_s[idx] = times([r.first_token_s for r in buf])
        rec.finished_s[idx] = times([r.finished_s for r in buf])
        rec.num_output_tokens[idx] = [r.num_output_tokens for r in buf]
        rec.num_cached_tokens[idx] = np.maximum(
            np.fromiter([r.num_cached_tokens for r in buf], np.int64, n), 0
        )
        rec.num_preemptions[idx] = [r.num_preemptions for r in buf]
        rec.replica[idx] = [r.replica for r in buf]
        rec.finished_length[idx] = [r.finished_length for r in buf]
        status = np.fromiter([r.status for r in buf], np.int64, n)  # as record_status, for the batch
        rec.status[idx] = np.where(
            status == ReqStatus.FINISHED,
            RequestStatus.FINISHED,
            np.where(status == ReqStatus.REJECTED, RequestStatus.REJECTED, RequestStatus.UNFINISHED),
        )
