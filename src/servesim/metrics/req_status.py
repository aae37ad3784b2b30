"""The states of a request in the engine (``engine.request.Request.status``).

They live here, below the engine, so that the record writer (``metrics.writer``) reads a
finished request's state without importing the engine; ``engine.request`` re-exports
``ReqStatus``, and the module is compiled with the engine (setup.py).
"""

from __future__ import annotations

from enum import IntEnum


class ReqStatus(IntEnum):
    """Ordered so that ``status >= FINISHED`` is one comparison."""

    WAITING = 0
    PREEMPTED = 1
    RUNNING = 2
    FINISHED = 3
    REJECTED = 4
