"""vLLM's CUDA graphs, as the step-time models see them: which batches run inside a captured
graph, padded to which size, and which kernels still pay a launch.

vLLM V1 (``vllm/config/vllm.py``: ``_set_cudagraph_sizes``; ``vllm/config/compilation.py``;
docs/design/cuda_graphs.md) captures graphs for a list of batch sizes in tokens::

    max = min(max_num_seqs * 2, 512, max_num_batched_tokens)   # max_cudagraph_capture_size
    sizes = [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), each <= max

A step of T <= max tokens is padded to the next size and replays that size's graph; a larger
step runs without graphs (eager). With the default ``cudagraph_mode`` FULL_AND_PIECEWISE
(optimization level O2, from vLLM 0.11) a uniform decode batch (one token per request) replays
a *full* graph, attention included; any other batch replays *piecewise* graphs, attention run
between them. ``--enforce-eager`` (``engine.enforce_eager``) captures nothing. Before 0.11
the default mode was PIECEWISE for every batch (decode too), with sizes [1, 2, 4] and every
multiple of 8 up to 512.

``graph_plan`` is a pure function of the engine knobs; ``padded_sizes`` tabulates the padded
size of every T up to the largest capture size, so the hot path pads with one list read.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.config.engine import version_tuple

#: Modes of a step, as vLLM's CUDA-graph dispatcher picks them.
FULL, PIECEWISE, EAGER = "full", "piecewise", "eager"


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """The capture sizes of one engine, and whether uniform decode batches run full graphs."""

    capture_sizes: tuple[int, ...]  # ascending; empty: eager (enforce_eager)
    full_decode: bool  # FULL_AND_PIECEWISE: uniform decode batches replay a full graph

    @property
    def max_size(self) -> int:
        """The largest captured size (0 when eager): steps above it run without graphs."""
        return self.capture_sizes[-1] if self.capture_sizes else 0

    def padded_sizes(self) -> list[int]:
        """``pad[t]`` = the capture size a step of t tokens runs at, for t = 0 .. max_size
        (empty when eager)."""
        if not self.capture_sizes:
            return []
        pad = [0] * (self.max_size + 1)
        i = 0
        for t in range(1, self.max_size + 1):
            while self.capture_sizes[i] < t:
                i += 1
            pad[t] = self.capture_sizes[i]
        return pad

    def mode(self, num_tokens: int, uniform_decode: bool) -> str:
        """FULL, PIECEWISE or EAGER for a step of ``num_tokens`` tokens."""
        if num_tokens > self.max_size or not self.capture_sizes:
            return EAGER
        return FULL if uniform_decode and self.full_decode else PIECEWISE


#: No graphs: every kernel launched one by one (``--enforce-eager``).
EAGER_PLAN = GraphPlan((), False)


def graph_plan(version: str, max_num_seqs: int, max_num_batched_tokens: int,
               enforce_eager: bool = False) -> GraphPlan:
    """The CUDA graphs vLLM ``version`` captures for these engine knobs (see the module doc)."""
    if enforce_eager:
        return EAGER_PLAN
    v = version_tuple(version)
    if v >= (0, 11):
        top = min(max_num_seqs * 2, 512, max_num_batched_tokens)
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
        full = True
    else:
        top = min(512, max_num_batched_tokens)
        sizes = [1, 2, 4] + list(range(8, top + 1, 8))
        full = False
    kept = tuple(s for s in sizes if s <= top)
    return GraphPlan(kept, full) if kept else EAGER_PLAN
