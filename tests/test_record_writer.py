"""The record writer (``metrics.writer``): each request's outcome, packed by
``Request.outcome`` and read a batch at a time by numpy, lands in its row, field by field."""

from __future__ import annotations

import numpy as np

from servesim.engine.request import ReqStatus, Request
from servesim.metrics.records import RequestRecords, RequestStatus
from servesim.metrics.req_status import OUTCOME
from servesim.metrics.writer import OUTCOME_DTYPE, RecordWriter


def _request(idx: int, status: ReqStatus) -> Request:
    r = Request(idx, 0.1 * idx, 100 + idx, 50)
    r.status = status
    return r


def test_outcomes_land_in_their_rows() -> None:
    done = _request(4, ReqStatus.FINISHED)
    done.first_scheduled_s, done.first_token_s, done.finished_s = 0.5, 0.75, 2.5
    done.num_output_tokens, done.num_cached_tokens, done.num_preemptions = 50, 32, 2
    done.replica, done.finished_length = 3, True
    refused = _request(1, ReqStatus.REJECTED)  # never scheduled: times -1, cached -1
    running = _request(2, ReqStatus.RUNNING)
    running.first_scheduled_s, running.num_output_tokens, running.num_cached_tokens = 0.25, 7, 0
    rec = RequestRecords.empty(6)
    writer = RecordWriter(rec, batch=2)  # the first two are written when the second comes
    writer.add(done)
    writer.add(refused, "too long")
    assert rec.status[4] == RequestStatus.FINISHED and rec.status[2] == RequestStatus.UNFINISHED
    writer.add(running)
    writer.flush()
    assert rec.arrival_s[[4, 1, 2]].tolist() == [0.4, 0.1, 0.2]
    assert rec.first_scheduled_s[4] == 0.5 and rec.first_token_s[4] == 0.75 and rec.finished_s[4] == 2.5
    assert (
        np.isnan(rec.first_scheduled_s[1]) and np.isnan(rec.first_token_s[1]) and np.isnan(rec.finished_s[1])
    )
    assert rec.first_scheduled_s[2] == 0.25 and np.isnan(rec.finished_s[2])
    assert rec.num_output_tokens.tolist() == [0, 0, 7, 0, 50, 0]
    assert rec.num_cached_tokens.tolist() == [0, 0, 0, 0, 32, 0]  # -1 (not scheduled) as 0
    assert rec.num_preemptions.tolist() == [0, 0, 0, 0, 2, 0]
    assert rec.replica.tolist() == [0, 0, 0, 0, 3, 0]
    assert rec.finished_length.tolist() == [False, False, False, False, True, False]
    assert rec.status.tolist() == [
        RequestStatus.UNFINISHED,
        RequestStatus.REJECTED,
        RequestStatus.UNFINISHED,
        RequestStatus.UNFINISHED,
        RequestStatus.FINISHED,
        RequestStatus.UNFINISHED,
    ]
    assert rec.reasons == {1: "too long"}


def test_the_packed_outcome_is_the_dtype_numpy_reads() -> None:
    r = _request((1 << 40) + 3, ReqStatus.FINISHED)
    r.finished_s, r.num_output_tokens, r.replica = 1e-300, 1 << 35, 17
    assert OUTCOME.size == OUTCOME_DTYPE.itemsize == 74
    row = np.frombuffer(r.outcome(), OUTCOME_DTYPE)[0]
    assert row["idx"] == (1 << 40) + 3 and row["arrival_s"] == 0.1 * ((1 << 40) + 3)
    assert row["finished_s"] == 1e-300 and row["num_output_tokens"] == 1 << 35
    assert row["replica"] == 17 and row["status"] == ReqStatus.FINISHED and not row["finished_length"]
