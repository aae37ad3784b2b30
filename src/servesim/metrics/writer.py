"""Writing a request's outcome into its row of ``RequestRecords``.

The engine calls these when a request finishes, is rejected or is still in flight at the
end of the run; one replica's run (``servesim.sim``) and a cluster (``servesim.cluster``)
write the same columns the same way.
"""

from __future__ import annotations

import numpy as np

from servesim.engine.request import ReqStatus, Request
from servesim.metrics.records import RequestRecords, RequestStatus


class RecordWriter:
    """Writes finished requests' records in batches (numpy columns are slow to set one
    element at a time); holds at most ``batch`` requests. ``flush`` before reading."""

    def __init__(self, records: RequestRecords, batch: int = 4096) -> None:
        self.records = records
        self.batch = batch
        self.buf: list[Request] = []

    def add(self, r: Request) -> None:
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


def record_status(r: Request) -> int:
    """The record's ``RequestStatus`` of ``r`` (the engine's status, folded to three)."""
    return (
        RequestStatus.FINISHED
        if r.status == ReqStatus.FINISHED
        else RequestStatus.REJECTED
        if r.status == ReqStatus.REJECTED
        else RequestStatus.UNFINISHED
    )


def write_record(rec: RequestRecords, r: Request, reason: str = "") -> None:
    """Store ``r``'s outcome in row ``r.idx`` (called when it finishes, is rejected or the
    run ends), with ``reason``, when given, saying why it was rejected or is unfinished."""
    i = r.idx
    rec.arrival_s[i] = r.arrival_s
    rec.first_scheduled_s[i] = r.first_scheduled_s if r.first_scheduled_s >= 0 else np.nan
    rec.first_token_s[i] = r.first_token_s if r.first_token_s >= 0 else np.nan
    rec.finished_s[i] = r.finished_s if r.finished_s >= 0 else np.nan
    rec.num_output_tokens[i] = r.num_output_tokens
    rec.num_cached_tokens[i] = max(r.num_cached_tokens, 0)
    rec.num_preemptions[i] = r.num_preemptions
    rec.replica[i] = r.replica
    rec.status[i] = record_status(r)
    rec.finished_length[i] = r.finished_length
    if reason:
        rec.reasons[i] = reason
