"""The API server's streaming of one run of pure-decode steps (``engine/frontend.py``).

The lazy engine times a run of decode steps in one go (``decode_runs.Run``) and sees its
outputs only at its end; the step-by-step engine hands the front end each step's outputs
as the step ends. ``RunStream`` gives the front end the run's outputs in that order, up
to any instant: up to an arrival (``Replica.on_arrival``), so that the arrival finds the
server as the step-by-step engine leaves it, and at the run's end. Compiled with mypyc.
"""

from __future__ import annotations

from servesim.engine.decode_runs import Run
from servesim.engine.frontend import Frontend
from servesim.engine.request import Request
from servesim.engine.scheduler import SchedulerOutput


class RunStream:
    """Where the streaming of ``run`` (begun by its first step ``out``, which ended at
    ``first_end_s``) has got to: the first step, then segment by segment, each one's steps
    but its last in closed form (``Frontend.after_steps``) and its last, where requests
    finish, as a step."""

    def __init__(self, fe: Frontend, out: SchedulerOutput, run: Run, first_end_s: float) -> None:
        self.fe = fe
        self.out = out
        self.run = run
        self.first_end_s = first_end_s
        self.seg = -1  # the next segment to stream; -1: the first step still is
        self.seg_i0 = 0  # its first step (an index in run.durations)
        self.i = 0  # the next step to stream
        self.t = first_end_s  # end of the last step streamed
        self.f = 0  # finished requests streamed

    def upto(self, upto: float, finished: list[Request] | None) -> None:
        """Stream the steps that ended by ``upto``. With ``finished`` (the run's end: its
        steps all streamed), the requests that finished in it, those inside it first
        (``run.finished``), in order; without, those inside it as their steps stream."""
        fe, run, out = self.fe, self.run, self.out
        segments = run.segments
        durations = run.durations
        done = run.finished if finished is None else finished
        if self.seg < 0:
            if self.first_end_s > upto:
                return
            n0 = out.num_pool + len(out.reqs)  # the pool and the new requests' first tokens
            gone = n0 - segments[0][0] if segments else 0  # finished in the first step
            if gone < 0:
                gone = 0
            d = fe.deliver_at(self.first_end_s, n0, len(out.reqs) + gone)
            for req in out.reqs:
                if req.first_token_s == self.first_end_s:
                    req.first_token_s = d
            f = 0
            while f < gone and f < len(done):
                done[f].finished_s = d
                f += 1
            self.f = f
            self.seg = 0
        while self.seg < len(segments):
            s = self.seg
            n, k, _ = segments[s]
            last_i = self.seg_i0 + k - 1  # the segment's last step
            t = self.t
            i = self.i
            while i < last_i:
                d = durations[i]  # read once (compiled, each read unboxes a float)
                if t + d > upto:
                    break
                t += d
                i += 1
            if i > self.i:
                fe.after_steps(self.t, durations, self.i, i, n)
                self.t = t
                self.i = i
            if i < last_i or t + durations[i] > upto:
                return
            t += durations[i]
            if s + 1 < len(segments):
                ends = n - segments[s + 1][0]
            elif finished is not None:
                ends = len(done) - self.f
            else:  # its finishes are not known yet: the run's end streams its last step
                return
            d = fe.deliver_at(t, n, ends if ends > 0 else 0)
            f = self.f
            while ends > 0 and f < len(done):
                done[f].finished_s = d
                f += 1
                ends -= 1
            self.f = f
            self.t = t
            self.i = self.seg_i0 = i + 1
            self.seg = s + 1
        if finished is not None:
            f = self.f
            while f < len(finished):
                finished[f].finished_s = fe.free_at_s
                f += 1
