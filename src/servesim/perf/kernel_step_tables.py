"""The tables the compiled step function (``perf.kernel_step.KernelStepTime``) reads, built on
demand for ``KernelPerfModel`` (a ``KernelStepTables``): seconds of every term that depends
on the step's token count alone, for T = 0 .. n, and of the per-request terms, for r = 0 ..
n (each grown by doubling when a step outgrows it); the launch costs of a step; the
attention rows of a batch size; and the prefill-attention grid at sustained clocks.
"""

from __future__ import annotations

from math import log

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.cuda_graphs import GraphPlan
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import LogCurve
from servesim.perf.kernel_step import KernelStepTime
from servesim.perf.sustained import SustainedClocks


class KernelStepTables:
    """The step's tables (mixed into ``KernelPerfModel``, whose constructor sets the
    attributes below before it builds them)."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    pp: int
    eff: Efficiencies
    graphs: GraphPlan  # the engine's CUDA-graph plan (EAGER_PLAN: none)
    clocks: SustainedClocks | None
    sources: dict[str, str]
    step: KernelStepTime
    _pad: np.ndarray  # token count -> the CUDA graph's size it runs at
    _el_tok: float  # elementwise seconds per token
    _el_const: float  # the memory-bound ops' fixed seconds
    _samp_req: float  # sampling seconds per request
    _c_eager: float  # launch costs of a step without graphs, between piecewise ones, of a full one
    _c_piece: float
    _c_full: float
    _token_ops: list[tuple[str, LogCurve, float]]  # (name, seconds-vs-T curve, multiplier)
    _hot_token_ops: list[tuple[str, LogCurve, float]]  # the same at sustained clocks
    _req_ops: list[tuple[str, LogCurve, float]]  # (name, seconds-vs-requests curve, multiplier)

    def _token_seconds(self, t: np.ndarray, hot: bool = False) -> np.ndarray:
        """Seconds of everything that depends on the token count ``t`` (> 0) alone (``hot``:
        at sustained clocks)."""
        t = self._padded(np.asarray(t, np.float64))
        total = self._el_tok * t + self._el_const
        for _name, curve, mult in self._hot_token_ops if hot else self._token_ops:
            total += mult * curve.at_many(t)
        if self.pp > 1:  # hidden states and residual between stages
            g = self.gpu
            total += (self.pp - 1) * (
                2 * self.model.hidden_size * 2.0 * t / (g.interconnect_bw * self.eff.comm)
                + g.interconnect_latency_s
            )
        return total

    def _padded(self, t: np.ndarray) -> np.ndarray:
        """Token counts as the CUDA graphs run them: the next capture size up to the largest."""
        pad = self._pad
        if len(pad) < 2:
            return t
        inside = t < len(pad)
        return np.where(inside, pad[np.where(inside, t, 0).astype(np.int64)], t)

    def _const_for(self, t: float, pt: float) -> float:
        """Launch costs of a step of ``t`` tokens (``pt`` of them prefill)."""
        if t <= (self.graphs.mixed_max_size if pt else self.graphs.max_size):
            return self._c_piece if pt else self._c_full
        return self._c_eager

    def _request_seconds(self, r: np.ndarray) -> np.ndarray:
        r = np.asarray(r, np.float64)
        total = self._samp_req * r
        for _name, curve, mult in self._req_ops:
            total += mult * curve.at_many(r)
        if self.tp > 1:  # logits gather to the first rank
            total += (self.tp - 1) / self.tp * self.model.vocab_size * 2.0 * r / (
                self.gpu.interconnect_bw * self.eff.comm
            ) + self.eff.allreduce_latency_s
        return total

    def _token_table(self, n: int, hot: bool = False) -> list[float]:
        """Seconds of the per-T terms for T = 0 .. at least n (twice the current table; ``hot``:
        at sustained clocks, the twin step's)."""
        step = self.step.hot if hot else self.step
        assert step is not None
        size = max(n + 1, 2 * len(step.tok))
        return [0.0, *self._token_seconds(np.arange(1, size), hot).tolist()]

    def _hot_grid(
        self, grid: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The prefill-attention grid at sustained clocks: each (batch, length) point slowed
        at its utilization of the bf16 peak (causal pairs of the full layers, the windowed
        layers' at most ``s W - W^2 / 2``)."""
        if grid is None or self.clocks is None or self.sources.get("attn_prefill", "").startswith("roofline"):
            return grid
        lb, ls, g = grid
        m = self.model
        b, s = np.exp(lb)[:, None], ls[None, :]
        w = float(m.sliding_window or 0)
        pairs = m.num_full_attention_layers * s * s / 2
        if m.num_sliding_layers and w:
            pairs = pairs + m.num_sliding_layers * np.where(s > w, s * w - w * w / 2, s * s / 2)
        flops = b * pairs * m.attn_flops_per_pair(self.tp)
        return lb, ls, np.log(self.clocks.slowed(np.exp(g), flops, self.gpu.flops_for("bfloat16")))

    def _request_table(self, n: int) -> list[float]:
        size = max(n + 1, 2 * len(self.step.req))
        return [0.0, *self._request_seconds(np.arange(1, size)).tolist()]

    @staticmethod
    def _row(
        att: tuple[np.ndarray, np.ndarray, np.ndarray] | None, b: float
    ) -> tuple[list[float], list[float]]:
        """(log length, log seconds) of the attention grid at batch ``b`` (log-linear in batch)."""
        assert att is not None
        lb, ls, grid = att
        x = log(b)
        i = min(max(int(np.searchsorted(lb, x, side="right")) - 1, 0), len(lb) - 2)
        w = min(max((x - lb[i]) / (lb[i + 1] - lb[i]), 0.0), 1.0)
        row = grid[i] if w == 0.0 else (1.0 - w) * grid[i] + w * grid[i + 1]
        return np.log(ls).tolist(), row.tolist()
