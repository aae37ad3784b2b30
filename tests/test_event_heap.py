"""The event loop's own heap (``engine.events``) against the order it stands for: events run
by ``(time, priority, seq)``, cancelled ones never, and ``next_loud_time`` is the earliest
pending event not scheduled quiet, under any mix of loud, quiet and cancelled events."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.events import EventLoop

# One operation: ("at", dt, priority, quiet) schedules an event dt after now; ("cancel", k)
# cancels the k-th scheduled one (pending or not); ("run", dt) runs to now + dt.
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("at"),
            st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]),
            st.integers(0, 2),
            st.booleans(),
        ),
        st.tuples(st.just("cancel"), st.integers(0, 40)),
        st.tuples(st.just("run"), st.sampled_from([0.0, 0.5, 1.0, 4.0])),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_events_run_in_key_order_and_the_loud_bound_holds(ops: list[tuple]) -> None:
    loop = EventLoop()
    ran: list[int] = []
    pending: dict[int, tuple[float, int, bool]] = {}  # seq -> (time, priority, quiet)
    seqs: list[int] = []
    expected: list[int] = []

    def reference_run(until: float) -> None:
        """The events the loop must run now, in the order of their keys."""
        due = sorted((t, p, s) for s, (t, p, _) in pending.items() if t <= until)
        for _, _, s in due:
            expected.append(s)
            del pending[s]

    for op in ops:
        if op[0] == "at":
            _, dt, prio, quiet = op
            t = loop.now + dt
            schedule = loop.at_quiet if quiet else loop.at
            s = schedule(t, ran.append, len(seqs), prio)  # runs as ran.append(its index)
            seqs.append(s)
            pending[s] = (t, prio, quiet)
        elif op[0] == "cancel":
            if op[1] < len(seqs):
                s = seqs[op[1]]
                assert loop.cancel(s) == (s in pending)
                pending.pop(s, None)
        else:
            until = loop.now + op[1]
            before = len(expected)
            reference_run(until)
            del ran[:]
            loop.run(until)
            assert [seqs[k] for k in ran] == expected[before:]
        assert len(loop) == len(pending)
        assert loop.next_time() == min((t for t, _, _ in pending.values()), default=math.inf)
        assert loop.next_loud_time() == min((t for t, _, q in pending.values() if not q), default=math.inf)
