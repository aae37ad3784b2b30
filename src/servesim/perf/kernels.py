"""The kernel database: measured vLLM kernel latencies and how servesim interpolates them.

The tables are NVIDIA AIConfigurator's measurements of vLLM's own kernels (vLLM 0.14.0
and 0.19.0, FlashAttention/FlashInfer attention, cuBLAS/CUTLASS GEMMs, vLLM's custom
all-reduce, NCCL, fused MoE) on A100, H100, H200, B200 and L40S, packed by
``tools/pack_kernels.py`` into ``servesim/data/kernels/`` (see ATTRIBUTION.md there).

Interpolation (the same rule for every table):

- **log-log, one axis at a time.** Latency is interpolated linearly in log latency against
  log size (m, n, k of a GEMM; batch and sequence length of attention; message size;
  tokens). GEMMs are multilinear in (log m, log n, log k); attention bilinear in
  (log batch, log length). On a grid point the measured value comes back exactly; between
  two points the value lies between theirs (monotone along each axis); a power law
  (latency proportional to size, or constant) is reproduced exactly.
- **off the grid: clamp, then scale by the roofline.** Outside an axis' range (a GEMM of
  more tokens than measured, a vocabulary wider than the widest N, a context longer than
  measured) the value is the one at the nearest edge, times the ratio of the roofline's
  time at the wanted shape to its time at the edge shape. So the curve is continuous at
  the edge and follows the physics (compute or bandwidth bound) beyond it, instead of
  extrapolating a local slope. The source skips very large batch x length combinations:
  there the last measured batch is the edge and the same rule applies; an isolated
  missing point inside a grid is skipped (its measured neighbours are interpolated).
- **faulty GEMM points dropped.** A GEMM measurement more than ``DIP_FACTOR`` times slower
  than its neighbours' interpolation along at least two of (m, n, k) is treated as missing
  (``without_dips``; H100's 0.14.0 table has 64 such points, the others 0-15).
- **categorical axes: nearest shape class.** Attention tables are per (heads, KV heads)
  pair on one rank; a model whose pair is not measured takes the nearest measured pair
  (KV heads first, then heads, in log distance) scaled by the roofline ratio. Head size,
  KV-cache dtype and window size must match a measured class, and a GEMM's dtype must
  have a table; otherwise that operator falls back to the roofline.

The interpolation's curves are ``perf.kernel_curves``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from math import log
from typing import Any

import numpy as np

from servesim.perf.kernel_curves import without_dips

#: servesim catalog GPU name -> the database's GPU folder.
GPU_TABLES = {
    "A100-80GB": "a100_sxm",
    "H100-SXM": "h100_sxm",
    "H200": "h200_sxm",
    "B200": "b200_sxm",
    "B300": "b300_sxm",
    "GB200": "gb200",
    "L40S": "l40s",
}
#: Blackwell data-centre GPUs (SM100 family): the tables measured on B200 alone (the served
#: MoE kernels' and the MLA module's) time the others too.
SM100_GPUS = ("B200", "B300", "GB200")


def sm100_folder(gpu_name: str) -> str:
    """The folder of tables measured on B200 alone that ``gpu_name`` reads (its own else)."""
    return "b200_sxm" if gpu_name in SM100_GPUS else GPU_TABLES.get(gpu_name, "")


#: GPUs of the same SM architecture and SM count, differing in HBM only (H100 SXM and H200:
#: one GH100 die): a shape measured on one is scaled to the other by the roofline (the
#: bandwidth ratio where memory-bound) when the GPU's own table lacks it or fails a check.
SIBLINGS = {"H100-SXM": "H200", "H200": "H100-SXM"}
#: Bytes per activation element an FP8 GEMM table may spend beyond the bf16 GEMM of the same
#: shape (``KernelDatabase.activation_quant_bytes``) and still time vLLM's served FP8 linear
#: layer. vLLM quantizes a linear layer's 16-bit input in one or two passes (per-tensor dynamic
#: scale: an amax pass and a cast pass, ``scaled_fp8_quant``; 128-wide groups: one pass,
#: ``per_token_group_quant_fp8``; either fused by torch.compile where it runs the op's native
#: form), about 5 bytes an element at most, and the GEMM then reads one byte where bf16 reads
#: two; the limit is six times that. The packed tables: H100's and H200's vLLM 0.14.0 FP8
#: tables 36-66 bytes (AIConfigurator's first vLLM GEMM collector: the excess independent of
#: n and proportional to m x k, i.e. spent on the activation, several unfused passes), every
#: other table 3-23 (L40S 0.14.0's per-tensor FP8 the highest, 23; H100's and H200's 0.19.0
#: 5-13; H200's per-tensor FP8 table of vLLM 0.18.0, not packed, the same as 0.19.0's).
ACTIVATION_QUANT_BYTES_MAX = 30.0
#: The largest median time an FP8 GEMM table may take, relative to the same table's bf16
#: GEMMs, at shapes where both are compute-bound (``KernelDatabase.compute_bound_ratio``:
#: m, n and k >= 4096), and still time a kernel vLLM serves: FP8's dense tensor-core rate is
#: twice bf16's on every GPU these tables cover (Ada, Hopper, Blackwell), so a served FP8
#: GEMM runs faster there. Served kernels measure 0.56-0.80 (H100's and H200's vLLM 0.19.0
#: FP8 and block-FP8 tables; B200's vLLM 0.24.0 CUTLASS ``scaled_mm``, 0.72); B200's, B300's
#: and GB200's 0.19.0 per-tensor FP8 tables 1.12-1.16 (FlashInfer's ``bmm_fp8`` timed with
#: its untuned fallback tactic, ``perf.kernel_layers``), their block-FP8 ones 1.02-1.05, the
#: 0.14.0 tables of H100 (1.12, 1.21), H200's block FP8 (1.20) and L40S's FP8 (1.17).
FP8_COMPUTE_BOUND_RATIO_MAX = 1.0
#: Catalog GPU -> a packed GEMM table, outside ``index.json``, of the kernel vLLM serves
#: FP8 GEMMs with where the GPU's own tables fail a check (``tools/pack_served_gemm.py``:
#: B200's per-tensor FP8 GEMMs of vLLM 0.24.0, CUTLASS ``scaled_mm``).
SERVED_GEMM_FILES = {"B200": "b200_sxm_0.24.0_gemm.npz"}
#: Dtype codes of the packed key arrays (``tools/pack_kernels.py`` writes the same tuple).
DTYPES = ("bfloat16", "fp8", "fp8_block", "nvfp4", "int4_wo", "w4a16_mxfp4", "float16")


def _index() -> list[dict[str, Any]]:
    return json.loads(resources.files("servesim").joinpath("data", "kernels", "index.json").read_text())


@lru_cache(maxsize=1)
def available_versions() -> dict[str, tuple[str, ...]]:
    """Database GPU folder -> the vLLM versions it has tables for, oldest first."""
    out: dict[str, list[str]] = {}
    for e in _index():
        out.setdefault(e["gpu"], []).append(e["vllm_version"])
    return {g: tuple(sorted(v, key=_version_key)) for g, v in out.items()}


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def kernel_versions(gpu_name: str) -> tuple[str, ...]:
    """vLLM versions with kernel tables for a catalog GPU (empty: none)."""
    return available_versions().get(GPU_TABLES.get(gpu_name, ""), ())


@lru_cache(maxsize=16)
def load_database(gpu_name: str, version: str) -> KernelDatabase:
    """The tables of one catalog GPU and vLLM version (read once per process)."""
    folder = GPU_TABLES[gpu_name]
    path = resources.files("servesim").joinpath("data", "kernels", f"{folder}_{version}.npz")
    with path.open("rb") as f, np.load(f, allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    return KernelDatabase(raw)


@lru_cache(maxsize=4)
def load_served_gemm(gpu_name: str) -> KernelDatabase | None:
    """The served-GEMM table of a catalog GPU (``SERVED_GEMM_FILES``), or None."""
    name = SERVED_GEMM_FILES.get(gpu_name)
    if name is None:
        return None
    path = resources.files("servesim").joinpath("data", "kernels", name)
    with path.open("rb") as f, np.load(f, allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    return KernelDatabase(raw)


class KernelDatabase:
    """The arrays of one packed file (see ``tools/pack_kernels.py`` for their layout)."""

    def __init__(self, raw: dict[str, np.ndarray]) -> None:
        self.meta: dict[str, Any] = json.loads(str(raw["meta"]))
        self.arrays: dict[str, np.ndarray] = {}
        for k, v in raw.items():
            if k == "meta" or k.startswith("shape."):
                continue
            if k in self.meta["float_arrays"]:  # stored byte-planed: undo it
                v = np.ascontiguousarray(v.T).view(np.float32).reshape(tuple(raw[f"shape.{k}"]))
            self.arrays[k] = v
        #: The GEMM grids as interpolated: measured, less their faulty points (``without_dips``).
        self._clean: dict[str, np.ndarray] = {}

    @property
    def version(self) -> str:
        return str(self.meta["vllm_version"])

    def has(self, prefix: str) -> bool:
        return f"{prefix}.lat" in self.arrays

    def gemm(self, dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(m, n, k, latency ms [m, n, k]) of one GEMM dtype, or None."""
        a = self.arrays
        if f"gemm.{dtype}.lat" not in a:
            return None
        axes = (a[f"gemm.{dtype}.m"], a[f"gemm.{dtype}.n"], a[f"gemm.{dtype}.k"])
        lat = self._clean.get(dtype)
        if lat is None:
            lat = self._clean[dtype] = without_dips(a[f"gemm.{dtype}.lat"], axes)
        return axes[0], axes[1], axes[2], lat

    def attention_class(
        self, prefix: str, kv_dtype: str, head_dim: int, heads: int, kv_heads: int, window: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]] | None:
        """(batch, length, latency ms [batch, length], (heads, kv heads) used) of the nearest
        measured shape class of ``prefix`` ('ctx' prefill or 'gen' decode), or None."""
        a = self.arrays
        if not self.has(prefix) or kv_dtype not in DTYPES:
            return None
        keys = a[f"{prefix}.keys"]
        same = (keys[:, 0] == DTYPES.index(kv_dtype)) & (keys[:, 1] == head_dim) & (keys[:, 4] == window)
        if not same.any():
            return None
        cand = np.flatnonzero(same)
        dist = [(abs(log(keys[c, 3] / kv_heads)), abs(log(keys[c, 2] / heads)), c) for c in cand]
        c = min(dist)[2]
        lens = a[f"{prefix}.isl"] if prefix == "ctx" else a[f"{prefix}.ctx"]
        return a[f"{prefix}.batch"], lens, a[f"{prefix}.lat"][c], (int(keys[c, 2]), int(keys[c, 3]))

    def prefill_peak_fraction(self, kv_dtype: str, peak: float) -> float:
        """The largest fraction of the peak FLOP/s ``peak`` any full-attention prefill point
        of this table's ``kv_dtype`` classes implies (2 b h d s^2 FLOPs of a causal
        prefill): above 1, a point ran faster than the GPU can, so those classes did not
        time the kernel they name. 0 without such classes. Cached on the database."""
        cache: dict[tuple[str, float], float] = self.__dict__.setdefault("_prefill_peak", {})
        if (kv_dtype, peak) in cache:
            return cache[(kv_dtype, peak)]
        a = self.arrays
        worst = 0.0
        if self.has("ctx") and kv_dtype in DTYPES:
            b = a["ctx.batch"].astype(np.float64)[:, None]
            s = a["ctx.isl"].astype(np.float64)[None, :]
            for key, lat in zip(a["ctx.keys"], a["ctx.lat"]):
                if key[0] != DTYPES.index(kv_dtype) or key[4]:  # sliding-window classes: not checked
                    continue
                with np.errstate(invalid="ignore", divide="ignore"):
                    frac = (
                        2.0
                        * b
                        * float(key[2])
                        * float(key[1])
                        * s
                        * s
                        / (lat.astype(np.float64) * 1e-3)
                        / peak
                    )
                if np.isfinite(frac).any():
                    worst = max(worst, float(np.nanmax(frac)))
        cache[(kv_dtype, peak)] = worst
        return worst

    def activation_quant_bytes(self, dtype: str, mem_bw: float) -> float:
        """Bytes per activation element an FP8 GEMM table spends beyond the same table's bf16
        GEMM, at HBM bandwidth ``mem_bw``: the median of ``(t_dtype - t_bf16) x mem_bw / (m k)``
        over the points of the narrowest measured n >= 128 with m >= 2048 and 2048 <= k <= 8192
        (tokens x inputs), where the GEMM itself is small beside the activation it quantizes.
        0 where the table lacks the points. ``ACTIVATION_QUANT_BYTES_MAX`` says what vLLM's
        quantization moves. Cached on the database."""
        cache: dict[tuple[str, float], float] = self.__dict__.setdefault("_quant_bytes", {})
        if (dtype, mem_bw) not in cache:
            cache[(dtype, mem_bw)] = self._activation_quant_bytes(dtype, mem_bw)
        return cache[(dtype, mem_bw)]

    def _activation_quant_bytes(self, dtype: str, mem_bw: float) -> float:
        ours, bf16 = self.gemm(dtype), self.gemm("bfloat16")
        if ours is None or bf16 is None:
            return 0.0
        ms, ns, ks, lat = ours
        bms, bns, bks, blat = bf16
        wide = [n for n in ns if n >= 128 and n in bns]
        if not wide:
            return 0.0
        n = min(wide)
        vals = []
        for i, m in enumerate(ms):
            if m < 2048 or m not in bms:
                continue
            bi = int(np.flatnonzero(bms == m)[0])
            for j, k in enumerate(ks):
                if not 2048 <= k <= 8192 or k not in bks:
                    continue
                a = float(lat[i, int(np.flatnonzero(ns == n)[0]), j])
                b = float(blat[bi, int(np.flatnonzero(bns == n)[0]), int(np.flatnonzero(bks == k)[0])])
                if np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0:
                    vals.append((a - b) * 1e-3 * mem_bw / (float(m) * float(k)))
        return float(np.median(vals)) if vals else 0.0

    def compute_bound_ratio(self, dtype: str) -> float:
        """The median of ``t_dtype / t_bf16`` over the shapes both GEMM tables of this database
        measure with m, n and k all >= 4096 (tokens, outputs, inputs), where a GEMM is
        compute-bound on every GPU of these tables: what ``FP8_COMPUTE_BOUND_RATIO_MAX`` bounds.
        0 where the tables share no such shape. Cached on the database."""
        cache: dict[str, float] = self.__dict__.setdefault("_bound_ratio", {})
        if dtype not in cache:
            cache[dtype] = self._compute_bound_ratio(dtype)
        return cache[dtype]

    def _compute_bound_ratio(self, dtype: str) -> float:
        ours, bf16 = self.gemm(dtype), self.gemm("bfloat16")
        if ours is None or bf16 is None:
            return 0.0
        picks = []
        for axis, other in zip(ours[:3], bf16[:3]):
            keep = [v for v in axis if v >= 4096 and v in other]
            picks.append(
                (
                    [int(np.flatnonzero(axis == v)[0]) for v in keep],
                    [int(np.flatnonzero(other == v)[0]) for v in keep],
                )
            )
        (mi, bmi), (ni, bni), (ki, bki) = picks
        a = ours[3][np.ix_(mi, ni, ki)].astype(np.float64)
        b = bf16[3][np.ix_(bmi, bni, bki)].astype(np.float64)
        ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
        return float(np.median(a[ok] / b[ok])) if ok.any() else 0.0

    def allreduce(self, num_gpus: int, graph: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """(sizes in elements, latency ms) of vLLM's custom all-reduce on ``num_gpus``, or None."""
        a = self.arrays
        if "ar.lat" not in a or num_gpus not in a["ar.num_gpus"]:
            return None
        return a["ar.size"], a["ar.lat"][0 if graph else 1, int(np.searchsorted(a["ar.num_gpus"], num_gpus))]

    def nccl(self, op: str, num_gpus: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(sizes in elements, latency ms) of one NCCL collective on ``num_gpus``, or None."""
        a = self.arrays
        if "nccl.lat" not in a or op not in a["nccl.ops"].tolist() or num_gpus not in a["nccl.num_gpus"]:
            return None
        i = a["nccl.ops"].tolist().index(op)
        return a["nccl.size"], a["nccl.lat"][i, int(np.searchsorted(a["nccl.num_gpus"], num_gpus))]

    def moe(
        self, hidden: int, inter: int, topk: int, num_experts: int, moe_tp: int, moe_ep: int, dtype: str
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(tokens, latency ms) of the fused MoE of exactly this shape, or None."""
        a = self.arrays
        if "moe.lat" not in a or dtype not in DTYPES:
            return None
        want = np.array([hidden, inter, topk, num_experts, moe_tp, moe_ep, DTYPES.index(dtype)])
        hit = np.flatnonzero((a["moe.keys"] == want).all(axis=1))
        return (a["moe.tokens"], a["moe.lat"][hit[0]]) if len(hit) else None

    def moe_nearest(
        self, hidden: int, inter: int, topk: int, num_experts: int, moe_tp: int, moe_ep: int, dtype: str
    ) -> tuple[np.ndarray, np.ndarray, int] | None:
        """(tokens, latency ms, the table's moe_tp) of the fused MoE of this shape, dtype and
        ``moe_ep`` at ``moe_tp`` or, when that is not measured, the nearest measured moe_tp
        (log distance, the smaller on a tie); None when no moe_tp is."""
        a = self.arrays
        if "moe.lat" not in a or dtype not in DTYPES:
            return None
        keys = a["moe.keys"]
        want = np.array([hidden, inter, topk, num_experts, moe_ep, DTYPES.index(dtype)])
        hit = [
            i
            for i in np.flatnonzero((keys[:, [0, 1, 2, 3, 5, 6]] == want).all(axis=1))
            if np.isfinite(a["moe.lat"][i]).sum() >= 2
        ]
        if not len(hit):
            return None
        c = min(hit, key=lambda i: (abs(log(keys[i, 4] / moe_tp)), keys[i, 4]))
        return a["moe.tokens"], a["moe.lat"][c], int(keys[c, 4])
