"""The states of a request in the engine (``engine.request.Request.status``), and the
layout of its outcome as the record writer reads it (``OUTCOME``).

They live here, below the engine, so that the record writer (``metrics.writer``) reads a
finished request's state without importing the engine; ``engine.request`` re-exports
``ReqStatus``, and the module is compiled with the engine (setup.py).
"""

from __future__ import annotations

from enum import IntEnum
from struct import Struct
from typing import Final

# A request's outcome as ``Request.outcome`` packs it (native byte order, standard sizes, no
# padding), in ``OUTCOME_FIELDS``' order: int64 idx, float64 arrival_s, first_scheduled_s,
# first_token_s, finished_s (seconds, negative for never), int64 num_output_tokens,
# num_cached_tokens, num_preemptions, replica, bool finished_length, int8 status (ReqStatus)
OUTCOME: Final = Struct("=q4d4q?b")
OUTCOME_FIELDS: Final = (
    "idx",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finished_s",
    "num_output_tokens",
    "num_cached_tokens",
    "num_preemptions",
    "replica",
    "finished_length",
    "status",
)


class ReqStatus(IntEnum):
    """Ordered so that ``status >= FINISHED`` is one comparison."""

    WAITING = 0
    PREEMPTED = 1
    RUNNING = 2
    FINISHED = 3
    REJECTED = 4
