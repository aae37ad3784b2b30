"""The roofline's count of a step's work (FLOPs and HBM bytes), kept apart so that mypyc
compiles it.

``RooflinePerfModel`` (``perf/roofline.py``) derives the coefficients from the model
(``perf.work.work_coefficients``); this class only multiplies them by a batch's
statistics. Compiled (``setup.py``), the replica calls it for every event step without an
interpreted frame (``StepAccounts.step``); as Python it computes the same sums, in the
same order, so the totals are identical either way.
"""

from __future__ import annotations

from servesim.perf.base import BatchStats


class WorkCounter:
    """(FLOPs, HBM bytes) of one iteration on one GPU, from ``work_coefficients``' terms."""

    proj_f: float
    proj_w: float
    proj_a_el: float  # per-token activation bytes in and out of the projections + elementwise
    mlp_f: float
    mlp_w: float
    mlp_a: float
    router_f: float
    router_w: float
    pf_f: float
    kv_tok: float
    qo_tok: float
    state_req: float  # per decode request: the linear-attention layers' states
    dec_f: float
    lm_f: float
    lm_w: float
    lm_req_samp: float  # per-request LM-head activations + sampling passes
    num_experts: float  # experts on one rank (0: a dense model)
    top_k: float
    miss: float  # probability that one token's routing misses a given expert
    pp: float

    def __init__(self, w: dict[str, float], num_experts: float, top_k: float, miss: float, pp: float) -> None:
        self.proj_f, self.proj_w = w["proj_f"], w["proj_w"]
        self.proj_a_el = w["proj_a"] + w["el_tok"]
        self.mlp_f, self.mlp_w, self.mlp_a = w["mlp_f"], w["mlp_w"], w["mlp_a"]
        self.router_f, self.router_w = w["router_f"], w["router_w"]
        self.pf_f, self.kv_tok, self.qo_tok, self.dec_f = w["pf_f"], w["kv_tok"], w["qo_tok"], w["dec_f"]
        self.lm_f, self.lm_w = w["lm_f"], w["lm_w"]
        self.state_req = w["state_req"]
        self.lm_req_samp = w["lm_req"] + w["samp_req"]
        self.num_experts, self.top_k, self.miss, self.pp = num_experts, top_k, miss, pp

    def batch_work(self, stats: BatchStats) -> tuple[float, float]:
        """(FLOPs, HBM bytes) on one GPU of a step's ``BatchStats``."""
        return self.work(
            stats.num_prefill_tokens,
            stats.prefill_attn_work,
            stats.num_prefill_reqs,
            stats.num_decode_reqs,
            stats.sum_decode_context,
            stats.sum_prefill_context,
        )

    def work(
        self,
        pt: float,
        prefill_attn_work: float,
        num_prefill_reqs: float,
        d: float,
        sum_decode_context: float,
        sum_prefill_context: float,
    ) -> tuple[float, float]:
        """``batch_work`` from the statistics themselves (fractional for a pipeline
        micro-batch's share): all layers' projections, MLP or experts, attention, LM head
        and sampling, one TP rank's share averaged over the pipeline stages."""
        t = pt + d
        r = num_prefill_reqs + d
        f = self.proj_f * t + self.lm_f * r
        b = self.proj_a_el * t + self.lm_req_samp * r
        if self.num_experts:
            pairs = t * self.top_k
            f += self.mlp_f * pairs + self.router_f * t
            b += self.mlp_a * pairs
            if t:
                b += self.mlp_w * self.num_experts * (1.0 - self.miss**t) + self.router_w
        else:
            f += self.mlp_f * t
            b += self.mlp_a * t
            if t:
                b += self.mlp_w
        if t:
            b += self.proj_w
        if r:
            b += self.lm_w
        if pt:
            f += self.pf_f * prefill_attn_work
            b += self.kv_tok * (sum_prefill_context + 2 * pt) + self.qo_tok * pt
        if d:
            s = sum_decode_context
            f += self.dec_f * s
            b += self.kv_tok * (s + d) + (self.qo_tok + self.state_req) * d
        return f / self.pp, b / self.pp
