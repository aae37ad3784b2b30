"""Writing a request's outcome into its row of ``RequestRecords``: the one record writer.

The driver (``servesim.cluster``) hands it each request when it finishes, is rejected or
is still in flight at the end of the run.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from servesim.metrics.records import RequestRecords, RequestStatus
from servesim.metrics.req_status import OUTCOME_FIELDS, ReqStatus

# ``req_status.OUTCOME``'s layout, as numpy reads a batch of outcomes
OUTCOME_DTYPE = np.dtype(
    list(zip(OUTCOME_FIELDS, ("=i8",) + ("=f8",) * 4 + ("=i8",) * 4 + ("?", "i1"), strict=True))
)


def _never_as_nan(a: np.ndarray) -> np.ndarray:
    """Times as records keep them: a copy with NaN for the negative ones (never)."""
    a = a.copy()
    a[a < 0] = np.nan
    return a


class Outcome(Protocol):
    """What the writer reads of a request: ``engine.request.Request`` (a protocol, since
    metrics does not import the engine). Times are seconds, negative for never."""

    @property
    def idx(self) -> int: ...  # its row

    def outcome(self) -> bytes:
        """Its record's fields packed as ``metrics.req_status.OUTCOME`` (idx, arrival_s,
        first_scheduled_s, first_token_s, finished_s, num_output_tokens, num_cached_tokens,
        num_preemptions, replica, finished_length, status): one call a request (compiled,
        each field read by name would be a lookup), a batch read by numpy as one buffer."""
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
        out = np.frombuffer(b"".join([r.outcome() for r in buf]), OUTCOME_DTYPE)
        idx = out["idx"]
        rec.arrival_s[idx] = out["arrival_s"]  # when sent, for closed-loop clients
        rec.first_scheduled_s[idx] = _never_as_nan(out["first_scheduled_s"])
        rec.first_token_s[idx] = _never_as_nan(out["first_token_s"])
        rec.finished_s[idx] = _never_as_nan(out["finished_s"])
        rec.num_output_tokens[idx] = out["num_output_tokens"]
        rec.num_cached_tokens[idx] = np.maximum(out["num_cached_tokens"], 0)
        rec.num_preemptions[idx] = out["num_preemptions"]
        rec.replica[idx] = out["replica"]
        rec.finished_length[idx] = out["finished_length"]
        status = out["status"]  # as record_status, for the batch
        rec.status[idx] = np.where(
            status == ReqStatus.FINISHED,
            RequestStatus.FINISHED,
            np.where(status == ReqStatus.REJECTED, RequestStatus.REJECTED, RequestStatus.UNFINISHED),
        )
