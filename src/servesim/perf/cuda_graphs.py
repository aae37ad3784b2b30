"""vLLM's CUDA graphs, as the step-time models see them: which batches run inside a captured
graph, padded to which size, and which kernels still pay a launch.

vLLM V1 (``vllm/config/vllm.py``: ``_set_cudagraph_sizes``; ``vllm/config/compilation.py``;
docs/design/cuda_graphs.md) captures graphs for a list of batch sizes in tokens::

    max = min(max_num_seqs * 2, 512, max_num_batched_tokens)   # max_cudagraph_capture_size
    sizes = [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), each <= max

A step of T <= max tokens is padded to the next size and replays that size's graph; a larger
step runs without graphs (eager); ``--max-cudagraph-capture-size`` (``engine.
max_cudagraph_capture_size``) sets ``max`` instead of ``min(max_num_seqs * 2, 512)``, still
capped at the token budget. With the default ``cudagraph_mode`` FULL_AND_PIECEWISE
(optimization level O2, from vLLM 0.11) a uniform decode batch (one token per request) replays
a *full* graph, attention included; any other batch replays *piecewise* graphs, attention run
between them. ``--enforce-eager`` (``engine.enforce_eager``) captures nothing. Before 0.11
the default mode was PIECEWISE for every batch (decode too), with sizes [1, 2, 4] and every
multiple of 8 up to 512. ``engine.cudagraph_mode`` picks another mode: PIECEWISE, or
FULL_DECODE_ONLY (full graphs for uniform decode batches, every other batch eager), or
NONE. A mixed batch under FULL_DECODE_ONLY is timed at its padded size when it is small
enough to have one (the table's time at up to 16 more tokens), an over-estimate of at most
a few percent.

``graph_plan`` is a pure function of the engine knobs; ``padded_sizes`` tabulates the padded
size of every T up to the largest capture size, so the hot path pads with one list read.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.catalog.models import ModelSpec
from servesim.config.vllm_version import version_tuple

#: Modes of a step, as vLLM's CUDA-graph dispatcher picks them.
FULL, PIECEWISE, EAGER = "full", "piecewise", "eager"


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """The capture sizes of one engine, and whether uniform decode batches run full graphs."""

    capture_sizes: tuple[int, ...]  # ascending; empty: eager (enforce_eager)
    full_decode: bool  # FULL_AND_PIECEWISE, FULL_DECODE_ONLY: uniform decode batches replay a full graph
    mixed: bool = True  # other batches replay piecewise graphs (False: FULL_DECODE_ONLY, they run eager)

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
        if uniform_decode and self.full_decode:
            return FULL
        return PIECEWISE if self.mixed else EAGER

    @property
    def mixed_max_size(self) -> int:
        """The largest step holding a prefill that replays a graph (0: such steps run eager)."""
        return self.max_size if self.mixed else 0


#: No graphs: every kernel launched one by one (``--enforce-eager``).
EAGER_PLAN = GraphPlan((), False)


def graph_plan(
    version: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enforce_eager: bool = False,
    max_capture_size: int | None = None,
    mode: str | None = None,
) -> GraphPlan:
    """The CUDA graphs vLLM ``version`` captures for these engine knobs (see the module doc):
    ``max_capture_size`` is ``--max-cudagraph-capture-size`` (vLLM 0.11+; None: min(2 x
    max_num_seqs, 512)), ``mode`` the ``cudagraph_mode`` (None: the version's default)."""
    if enforce_eager or mode == "none":
        return EAGER_PLAN
    v = version_tuple(version)
    if v >= (0, 11):
        top = min(max_num_seqs * 2, 512) if max_capture_size is None else max_capture_size
        top = min(top, max_num_batched_tokens)
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
        mode = mode or "full_and_piecewise"
    else:
        top = min(512 if max_capture_size is None else max_capture_size, max_num_batched_tokens)
        sizes = [1, 2, 4] + list(range(8, top + 1, 8))
        mode = mode or "piecewise"
    kept = tuple(s for s in sizes if s <= top)
    if not kept:
        return EAGER_PLAN
    return GraphPlan(kept, full_decode=mode != "piecewise", mixed=mode != "full_decode_only")


def eager_kernels_per_layer(model: ModelSpec, tp: int, dp: int = 1) -> float:
    """Kernels one layer launches when run eagerly, on average over the layers (the count the
    host floor scales with; a dense GQA layer, Llama's, is its reference).

    Counted as vLLM's layers issue them, elementwise work fused as torch.compile fuses it
    (an RMS norm with its residual add is one kernel): GQA attention 4 (QKV GEMM, rotary,
    attention, O GEMM), MLA 10 (q_a, its norm, q_b, kv_a, its norm, rotary, the absorbed k
    and v GEMMs, attention, O); 2 norms; a dense MLP 3 (gate/up, activation, down); a fused
    MoE 7 (router GEMM, top-k, token sorting, two grouped GEMMs, activation, combine), a
    shared expert 3 more (expert parallelism inside the TP group adds none: vLLM's ranks
    each run their experts on the whole batch); under TP an all-reduce after attention and
    one after the MLP; MiniMax-M2's q/k norms 2 kernels and 1 all-reduce more. ``dp`` > 1
    data-parallel ranks of an MoE model gather and scatter their tokens around each MoE
    layer (2 collectives, in place of its all-reduce). A simplification: the fused kernels
    of a quantization scheme (activation quantization, scale layouts) are not counted apart."""
    m = model
    L = m.num_layers
    per = (10 if m.is_mla else 4) + 2 + (1 if tp > 1 else 0)
    if m.qk_norm_allreduce:
        per += 2 + (1 if tp > 1 else 0)
    dense = 3 + (1 if tp > 1 else 0)
    if not m.is_moe:
        return per + dense
    moe = 7 + (3 if m.shared_expert_intermediate_size else 0) + (2 if dp > 1 else 1 if tp > 1 else 0)
    return per + (m.num_moe_layers * moe + (L - m.num_moe_layers) * dense) / L


def reference_kernels(tp: int) -> float:
    """A dense GQA layer's eager kernels at this TP (what ``EAGER_HOST_S_PER_LAYER`` is per)."""
    return 4 + 2 + (2 if tp > 1 else 0) + 3
