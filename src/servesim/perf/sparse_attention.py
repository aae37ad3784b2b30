"""The step time of DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5), on top of any step model.

A DSA layer is MLA whose queries each attend to at most ``index_topk`` (K = 2,048) tokens,
picked by a lightning indexer that scores every context token. vLLM v0.19.0 runs it as
(``model_executor/models/deepseek_v2.py`` ``Indexer``, ``model_executor/layers/
sparse_attn_indexer.py``, ``v1/attention/backends/mla/flashmla_sparse.py``):

1. the indexer's projections, whole on every TP rank: ``wq_b`` (query latent to
   ``index_n_heads x index_head_dim``), ``wk`` and ``weights_proj``; its queries are
   quantized to fp8 and its key (with a scale) is written to its own fp8 cache;
2. its scores (DeepGEMM ``fp8_mqa_logits`` at prefill, ``fp8_paged_mqa_logits`` at decode):
   ``index_n_heads x index_head_dim`` fp8 multiply-adds for every (query, context token)
   pair, reading every context token's indexer key, into one fp32 logit per pair that a
   top-k kernel (``top_k_per_row_prefill`` / ``_decode``) reads back;
3. the main attention over the K chosen tokens, prefill and decode alike, in MLA's
   absorbed (multi-query) form over the latent (``sparse_backend``): FlashMLA's sparse
   kernel (``flash_mla_sparse_fwd``; with an fp8 cache and fewer than 32 heads per rank,
   its fp8 decode kernel for every token) with the query heads padded to 64 (Hopper; 128
   on Blackwell, and 128 for more than 64 heads), or on Blackwell from v0.17.0
   FlashInfer's (``v1/attention/backends/mla/flashinfer_mla_sparse.py``: TRT-LLM's
   kernel, heads unpadded), gathering each query's own K latents.

``SparseAttentionPerfModel`` wraps the model's ordinary step model (roofline, measured
kernels or a calibrated profile), which times everything but attention as for DeepSeek-V3,
and:

- decode: gives it each decode's context cut to K, so that its dense-MLA decode attention
  (the same absorbed kernel reading the same latent per key) is timed over the tokens a
  sparse decode reads. The batch carries only the sum of contexts, so the cut is
  ``min(sum, decodes x K)``: exact when every decode is past K or none is, an upper bound
  for a batch that mixes both;
- prefill: gives it one key per prompt token (its attention kernel's floor) in place of
  dense MLA's causal prefill, which runs non-absorbed with real heads, and adds the sparse
  prefill on the roofline: ``sparse_prefill_pairs`` (query, key) pairs (each query's
  earlier tokens up to K; a step's chunks taken as equal),
  ``2 x heads x (2 kv_lora_rank + qk_rope_head_dim)`` FLOPs each at the kernel's heads,
  and the context's latents read from HBM once per chunk: neighbouring queries pick
  overlapping tokens and their gathers are served from L2 (one layer's latent of a 32k
  context is 38 MB, under an H100's or H200's 50 MB of L2);
- adds the indexer on the roofline: its projections as GEMMs (FLOPs per token, weights
  read once a step), its scores (FLOPs per pair in fp8, each context token's key read once
  per request, 8 bytes of fp32 logit per pair written and read by the top-k), its queries'
  fp8 quantization, and ``INDEXER_KERNELS_PER_LAYER`` kernels' fixed cost.

The roofline terms use ``Efficiencies``' defaults: linear roofs for the projections, the
attention-prefill roofs for prefill scores and attention, the attention-decode roofs for
decode scores. Simplified: the measured kernel tables hold no sparse or indexer kernel;
the sparse decode's padded heads are not charged (at one query token per request it reads
as the dense decode does and stays memory-bound); speculative decoding's extra query tokens
are counted as decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servesim.catalog import sparse_attention as dsa
from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.base import BatchStats, PerfModel
from servesim.perf.capabilities import BatchWork, PipelineStages, VectorDecode, decode_step_times
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.pipelined import stage_head_s

#: Kernels of one layer's indexer: wq_b, wk and weights_proj GEMMs, k_norm, rotary, the
#: queries' fp8 quantization, the key's quantize-and-cache write, the logits, the top-k.
INDEXER_KERNELS_PER_LAYER = 9
#: Bytes per pair of the indexer's logits: an fp32 written by the logits kernel, read by the top-k.
LOGIT_BYTES_PER_PAIR = 8
#: FlashMLA's sparse kernels' query heads: the heads per rank are padded up to one of these.
_PADDED_HEADS_HOPPER = 64
_PADDED_HEADS_BLACKWELL = 128
#: FlashInfer's sparse MLA backend: vLLM v0.17.0 and later, SM 10.x only.
_FLASHINFER_SPARSE_FROM = (0, 17, 0)
_FP8_FIRST_FROM = (0, 19, 0)


def padded_heads(heads_per_rank: int, sm: int | None) -> int:
    """Query heads FlashMLA's sparse kernel computes (``FlashMLASparseImpl``: the bf16 kernel
    pads to 64 on SM90, 128 on SM100; the fp8 decode kernel to 64 up to 64 heads, else 128)."""
    floor = _PADDED_HEADS_BLACKWELL if sm is not None and sm >= 100 else _PADDED_HEADS_HOPPER
    if heads_per_rank > _PADDED_HEADS_HOPPER:
        floor = _PADDED_HEADS_BLACKWELL
    return max(floor, heads_per_rank)


@dataclass(frozen=True, slots=True)
class SparseBackend:
    """The sparse-MLA kernel vLLM runs and what it implies: ``latent_bytes`` of one token's
    latent in one layer's cache, the query ``heads`` it computes per rank, the dtype of its
    math (``math``), and why it was chosen."""

    name: str
    latent_bytes: float
    heads: int
    math: str
    why: str


def _version(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def sparse_backend(
    m: ModelSpec, sm: int | None, version: str, tp: int, kv_dtype_bytes: float
) -> SparseBackend:
    """vLLM's sparse-MLA backend for ``m`` at TP ``tp`` on a GPU of compute capability
    ``sm`` x 10 (``vllm/platforms/cuda.py`` ``_get_backend_priorities``, v0.17.0-v0.19.0).

    On SM 10.x from v0.17.0 FlashInfer's sparse MLA (TRT-LLM's kernel, the heads as they
    are, the standard cache layout: ``kv_lora_rank + qk_rope_head_dim`` elements, fp8 math
    with an fp8 cache) comes first for 16 heads per rank or fewer, and from v0.19.0 also
    for any fp8 cache; everywhere else FlashMLA's sparse kernels (``FLASHMLA_SPARSE``: an
    fp8 cache in ``fp8_ds_mla``'s 656-byte layout, the heads padded, bf16 math)."""
    heads = m.num_attention_heads // tp
    fp8 = kv_dtype_bytes == 1
    v = _version(version)
    if sm is not None and 100 <= sm < 110 and v >= _FLASHINFER_SPARSE_FROM:
        if heads <= 16 or (fp8 and v >= _FP8_FIRST_FROM):
            why = "fp8 KV cache" if fp8 and heads > 16 else f"{heads} heads per rank (<= 16)"
            return SparseBackend(
                "flashinfer_mla_sparse",
                (m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes,
                heads,
                "fp8" if fp8 else "bfloat16",
                f"vllm/platforms/cuda.py, v0.17.0+: SM{sm} sparse MLA, {why} -> FLASHINFER_MLA_SPARSE",
            )
    return SparseBackend(
        "flashmla_sparse",
        dsa.sparse_latent_bytes(m, kv_dtype_bytes),
        padded_heads(heads, sm),
        "bfloat16",
        f"vllm/platforms/cuda.py: SM{sm} sparse MLA -> FLASHMLA_SPARSE "
        f"({heads} heads per rank padded to {padded_heads(heads, sm)})",
    )


def served_kv_bytes_per_token(
    m: ModelSpec, sm: int | None, version: str, tp: int, kv_dtype_bytes: float | None, pp: int = 1
) -> float:
    """KV bytes of one token on one GPU as vLLM ``version`` lays the cache out on this GPU:
    ``m.kv_bytes_per_token`` but for a DSA model, whose latent takes its backend's layout."""
    if not m.index_topk:
        return m.kv_bytes_per_token(tp, kv_dtype_bytes, pp)
    kv_b = m.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    latent = sparse_backend(m, sm, version, tp, kv_b).latent_bytes
    return m.layers_per_stage(pp) * (latent + dsa.indexer_key_bytes(m))


@dataclass(frozen=True, slots=True)
class SparseAttentionWork:
    """What DSA adds to a step on one GPU, summed over the layers of its (largest) stage.

    Units: FLOPs and bytes. ``topk``: K; ``proj_f``: indexer projection FLOPs per token;
    ``proj_w``: indexer weight bytes (read once a step); ``quant_b``: bytes per token of the
    indexer queries' bf16 write and read and fp8 write and read; ``score_f``: indexer FLOPs
    per (query, context token) pair; ``key_b``: indexer key bytes per context token;
    ``logit_b``: logit bytes per pair; ``attn_f``: sparse attention FLOPs per (query,
    chosen token) pair at the padded heads; ``attn_b``: latent bytes per context token;
    ``kernels``: indexer kernels of the stage.
    """

    topk: int
    proj_f: float
    proj_w: float
    quant_b: float
    score_f: float
    key_b: float
    logit_b: float
    attn_f: float
    attn_b: float
    kernels: int


def sparse_attention_work(
    m: ModelSpec, backend: SparseBackend, tp: int = 1, pp: int = 1
) -> SparseAttentionWork:
    """The model's DSA work on one GPU of ``tp`` x ``pp`` with this sparse-MLA ``backend``."""
    layers = m.layers_per_stage(pp)
    quantized, plain = dsa.indexer_params(m)
    index_width = m.index_n_heads * m.index_head_dim
    return SparseAttentionWork(
        topk=m.index_topk,
        proj_f=layers * 2.0 * (quantized + plain),
        proj_w=layers * dsa.indexer_weight_bytes(m),
        quant_b=layers * (2 * 2 + 2 * 1) * index_width,
        score_f=layers * 2.0 * index_width,
        key_b=layers * dsa.indexer_key_bytes(m),
        logit_b=layers * float(LOGIT_BYTES_PER_PAIR),
        attn_f=layers * 2.0 * backend.heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim),
        attn_b=layers * backend.latent_bytes,
        kernels=layers * INDEXER_KERNELS_PER_LAYER,
    )


def sparse_prefill_pairs(stats: BatchStats, topk: int) -> float:
    """(query, key) pairs of the step's prefill chunks when each query attends to at most
    ``topk`` keys: for a chunk of c tokens on p computed ones, the integral of min(x, K)
    from p to p + c (the same continuous count as ``prefill_attn_work``' c (p + c / 2)):

        p + c <= K:  c (p + c / 2)          every earlier token
        p >= K:      c K                    K each
        otherwise:   (K^2 - p^2) / 2 + (p + c - K) K

    The batch carries only sums, so a step's chunks are taken as equal: its prefill requests
    times the pairs of the mean chunk on the mean context (exact for one chunk a step)."""
    r = stats.num_prefill_reqs
    if not r:
        return 0.0
    c, p, k = stats.num_prefill_tokens / r, stats.sum_prefill_context / r, float(topk)
    if p + c <= k:
        return r * c * (p + c / 2)
    if p >= k:
        return r * c * k
    return r * ((k * k - p * p) / 2 + (p + c - k) * k)


def _roof(flops: float, peak: float, nbytes: float, bw: float) -> float:
    return max(flops / peak, nbytes / bw)


@dataclass(slots=True)
class SparseAttentionPerfModel:
    """A DSA model's step time: ``base`` (the ordinary step model) at the sparse statistics,
    plus the indexer and the sparse prefill on the roofline (see the module's docstring)."""

    base: PerfModel
    work: SparseAttentionWork
    gpu: GpuSpec
    linear_dtype: str = "bfloat16"
    attention_dtype: str = "bfloat16"
    eff: Efficiencies = Efficiencies()
    # The roofs the terms divide by (FLOP/s and bytes/s at their efficiencies), and the base
    # model's optional capabilities, resolved once (a protocol check per step is slow).
    _lin: float = field(init=False)
    _lin_bw: float = field(init=False)
    _pf_fp8: float = field(init=False)
    _pf_attn: float = field(init=False)
    _pf_bw: float = field(init=False)
    _dec_fp8: float = field(init=False)
    _dec_bw: float = field(init=False)
    _base_work: BatchWork | None = field(init=False)
    _base_vector: VectorDecode | None = field(init=False)

    def __post_init__(self) -> None:
        g, e = self.gpu, self.eff
        fp8 = g.flops_for("fp8")
        self._lin = g.flops_for(self.linear_dtype) * e.linear_compute
        self._lin_bw = g.mem_bw * e.linear_memory
        self._pf_fp8 = fp8 * e.attn_prefill_compute
        self._pf_attn = g.flops_for(self.attention_dtype) * e.attn_prefill_compute
        self._pf_bw = g.mem_bw * e.attn_prefill_memory
        self._dec_fp8 = fp8 * e.attn_decode_compute
        self._dec_bw = g.mem_bw * e.attn_decode_memory
        self._base_work = self.base if isinstance(self.base, BatchWork) else None
        self._base_vector = self.base if isinstance(self.base, VectorDecode) else None

    def sparse_stats(self, stats: BatchStats) -> BatchStats:
        """The statistics the base model times: decode contexts cut to K, prefill attention
        at one key per prompt token (the policy and LoRA fields are for the wrappers outside)."""
        return BatchStats(
            num_prefill_tokens=stats.num_prefill_tokens,
            prefill_attn_work=float(stats.num_prefill_tokens),
            num_prefill_reqs=stats.num_prefill_reqs,
            num_decode_reqs=stats.num_decode_reqs,
            sum_decode_context=min(stats.sum_decode_context, stats.num_decode_reqs * self.work.topk),
            sum_prefill_context=stats.sum_prefill_context,
        )

    # ------------------------------------------------------------------ the added terms

    def _terms(self, stats: BatchStats) -> tuple[float, float, float, float, float]:
        """Seconds of the indexer's projections, its kernels' fixed cost, its prefill scores,
        the sparse prefill and the indexer's decode scores (0 where the step has none)."""
        w = self.work
        tokens = stats.num_prefill_tokens + stats.num_decode_reqs
        if not tokens:
            return 0.0, 0.0, 0.0, 0.0, 0.0
        proj = _roof(w.proj_f * tokens, self._lin, w.proj_w + w.quant_b * tokens, self._lin_bw)
        scores = attn = decode = 0.0
        if stats.num_prefill_tokens:
            pairs = stats.prefill_attn_work
            keys = stats.sum_prefill_context + stats.num_prefill_tokens
            # keys: read from the cache, written to and read from the gather workspace
            scores = _roof(
                w.score_f * pairs, self._pf_fp8, 3 * w.key_b * keys + w.logit_b * pairs, self._pf_bw
            )
            chosen = sparse_prefill_pairs(stats, w.topk)
            attn = _roof(w.attn_f * chosen, self._pf_attn, w.attn_b * keys, self._pf_bw)
        if stats.num_decode_reqs:
            s = stats.sum_decode_context
            decode = _roof(w.score_f * s, self._dec_fp8, (w.key_b + w.logit_b) * s, self._dec_bw)
        return proj, w.kernels * self.eff.kernel_overhead_s, scores, attn, decode

    def terms_s(self, stats: BatchStats) -> dict[str, float]:
        """Seconds of each added term of a step, by name (the step's own terms only)."""
        if not stats.num_prefill_tokens + stats.num_decode_reqs:
            return {}
        proj, kernels, scores, attn, decode = self._terms(stats)
        out = {"indexer_proj": proj, "indexer_kernels": kernels}
        if stats.num_prefill_tokens:
            out.update(indexer_prefill=scores, sparse_prefill=attn)
        if stats.num_decode_reqs:
            out["indexer_decode"] = decode
        return out

    def _decode_added_s(self, n: int, s: np.ndarray) -> np.ndarray:
        """``_terms``' sum for pure-decode steps of ``n`` requests, one per context sum."""
        w = self.work
        fixed = _roof(w.proj_f * n, self._lin, w.proj_w + w.quant_b * n, self._lin_bw)
        score = np.maximum(w.score_f * s / self._dec_fp8, (w.key_b + w.logit_b) * s / self._dec_bw)
        return fixed + w.kernels * self.eff.kernel_overhead_s + score

    # ------------------------------------------------------------------ PerfModel

    def batch_time(self, stats: BatchStats) -> float:
        return self.base.batch_time(self.sparse_stats(stats)) + sum(self._terms(stats))

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        """``batch_time`` of pure-decode steps, vectorized over their context sums."""
        s = np.asarray(sum_decode_context, np.float64)
        cut = np.minimum(s, num_decode_reqs * self.work.topk)
        base = (
            self._base_vector.decode_step_times(num_decode_reqs, cut)
            if self._base_vector is not None
            else decode_step_times(self.base, num_decode_reqs, cut)
        )
        return base + self._decode_added_s(num_decode_reqs, s)

    def added_work(self, stats: BatchStats) -> tuple[float, float]:
        """(FLOPs, bytes) the added terms move on one GPU."""
        w = self.work
        tokens = stats.num_prefill_tokens + stats.num_decode_reqs
        if not tokens:
            return 0.0, 0.0
        pairs = stats.prefill_attn_work + stats.sum_decode_context
        chosen = sparse_prefill_pairs(stats, w.topk) if stats.num_prefill_tokens else 0.0
        keys = stats.sum_prefill_context + stats.num_prefill_tokens
        flops = w.proj_f * tokens + w.score_f * pairs + w.attn_f * chosen
        nbytes = (
            w.proj_w
            + w.quant_b * tokens
            + w.logit_b * pairs
            + w.key_b * (3 * keys + stats.sum_decode_context)
            + w.attn_b * keys
        )
        return flops, nbytes

    def batch_work(self, stats: BatchStats) -> tuple[float, float]:
        """(FLOPs, bytes) on one GPU: the base model's at the sparse statistics, plus the added."""
        sparse = self.sparse_stats(stats)
        if self._base_work is not None:
            flops, nbytes = self._base_work.batch_work(sparse)
        else:
            flops, nbytes = self.base.batch_flops(sparse), self.base.batch_bytes(sparse)
        f, b = self.added_work(stats)
        return flops + f, nbytes + b

    @property
    def pp(self) -> int:
        """The base model's pipeline stages (1: none)."""
        return self.base.pp if isinstance(self.base, PipelineStages) else 1

    def bubble_fraction(self, stats: BatchStats) -> float:
        """The base model's pipeline bubbles (the added terms run on every stage alike)."""
        if isinstance(self.base, PipelineStages):
            return self.base.bubble_fraction(self.sparse_stats(stats))
        return 0.0

    def batch_flops(self, stats: BatchStats) -> float:
        return self.base.batch_flops(self.sparse_stats(stats)) + self.added_work(stats)[0]

    def batch_bytes(self, stats: BatchStats) -> float:
        return self.base.batch_bytes(self.sparse_stats(stats)) + self.added_work(stats)[1]

    def last_stage_s(self, stats: BatchStats) -> float:
        """The base model's last-stage share (``perf.pipelined.stage_times``)."""
        return stage_head_s(self.base, self.sparse_stats(stats))

    def note(self) -> str:
        """What it adds, for the run's description of its step model (``perf.describe``)."""
        return (
            f"plus DeepSeek sparse attention: decode attention over at most {self.work.topk} "
            f"tokens, the indexer and the sparse prefill on the roofline"
        )


def sparse_attention_perf_model(
    model: ModelSpec,
    gpu: GpuSpec,
    perf: PerfModel,
    sm: int | None,
    version: str,
    tp: int = 1,
    pp: int = 1,
    kv_dtype_bytes: float = 2.0,
) -> PerfModel:
    """``perf`` wrapped in ``SparseAttentionPerfModel`` for a DSA model served by vLLM
    ``version`` on a GPU of compute capability ``sm`` x 10; else ``perf``."""
    if not model.index_topk:
        return perf
    backend = sparse_backend(model, sm, version, tp, kv_dtype_bytes)
    work = sparse_attention_work(model, backend, tp, pp)
    return SparseAttentionPerfModel(perf, work, gpu, model.linear_compute_dtype, backend.math)
