"""Accelerators: peak compute, memory, links, power and price of one GPU.

Facts come from the spec sheets collected in the project's ``gpu_specs.csv`` (copied here;
the package never reads that file). Conventions:

- ``peak_flops`` are dense (no 2:4 sparsity) tensor-core FLOP/s per dtype; ``float32`` is
  the plain (non-tensor-core) FP32 rate, which is what PyTorch uses by default.
- ``mem_bytes`` is the memory the driver reports (what ``torch.cuda.mem_get_info`` returns
  and vLLM multiplies by ``gpu_memory_utilization``): the spec sheet's "80 GB" is 80 GiB of
  HBM of which the driver keeps a little (an H100 80GB reports 79.19 GiB). Values are
  approximate for parts without such a reading.
- ``interconnect_bw`` is unidirectional bytes/s per GPU: half the bidirectional figure of
  the spec sheet (NVLink 4: 900 GB/s bidirectional -> 450 GB/s).
- ``idle_power_w`` is a GPU powered up with a model loaded but no kernel running: about
  20-25% of TDP for datacenter parts (nvidia-smi on an idle H100 SXM reads ~100-150 W).
  It is a typical value, not a measurement of any particular board.
- ``usd_per_hour`` is one typical on-demand price per GPU (early-2026 third-party quotes
  from the CSV notes); prices move often and vary by provider, so treat them as a default.
- ``num_sms`` is the number of streaming multiprocessors (AMD: compute units) the product
  enables, which GEMM wave quantisation divides output tiles over (``Efficiencies.gemm_tile_*``);
  0 (custom hardware) turns wave quantisation off. Sources, per GPU below: NVIDIA's
  architecture whitepapers and datasheets, AMD's MI300X datasheet.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from servesim.errors import CatalogError

if TYPE_CHECKING:
    from servesim.config import GpuConfig

_GIB = 2**30


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator. Units: FLOP/s, bytes, bytes/s, seconds, watts, USD per hour."""

    name: str
    peak_flops: dict[str, float] = field(hash=False)
    mem_bytes: float
    mem_bw: float
    interconnect_bw: float
    interconnect_latency_s: float
    idle_power_w: float
    max_power_w: float
    usd_per_hour: float
    num_sms: int = 0
    # Host<->GPU copy bandwidth, bytes/s per GPU and direction, pinned host memory with the
    # copy engines (what KV offloading moves blocks over): ``_HOST_LINK`` below.
    host_bw: float = 25e9
    # Host memory per GPU, bytes: the system memory of the catalog's reference node divided by
    # its GPUs (``_HOST_MEM`` below); what KV offloading to the CPU can use at most. 0: unknown.
    host_mem_bytes: float = 0.0

    def flops_for(self, dtype: str) -> float:
        """Peak dense FLOP/s for a dtype; fp8 falls back to bf16 on GPUs without fp8 units."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        if dtype in ("fp8", "float16", "bfloat16"):
            return self.peak_flops["bfloat16"]
        raise CatalogError(f"GPU {self.name}: no peak FLOP/s for dtype {dtype!r}")


def _flops(bf16_tflops: float, fp8_tflops: float | None, fp32_tflops: float) -> dict[str, float]:
    out = {"bfloat16": bf16_tflops * 1e12, "float16": bf16_tflops * 1e12, "float32": fp32_tflops * 1e12}
    if fp8_tflops is not None:
        out["fp8"] = fp8_tflops * 1e12
    return out


# name, (bf16, fp8, fp32) TFLOP/s, driver-visible bytes, HBM bytes/s, unidirectional link bytes/s,
# link latency s, idle W, TDP W, $/GPU-hour, SMs.
_GPUS: tuple[GpuSpec, ...] = (
    # A100 SXM4 80GB: NVLink 3 600 GB/s bidir; $1.49-2.49 typical range -> midpoint.
    # SMs: 108 of GA100's 128 (NVIDIA A100 Tensor Core GPU Architecture whitepaper, table 1).
    GpuSpec("A100-80GB", _flops(312, None, 19.5), 79.15 * _GIB, 2.039e12, 300e9, 5e-6, 90, 400, 1.99, 108),
    # H100 SXM5: NVLink 4 900 GB/s bidir; $2.49 (Lambda, bottom of the 2.49-3.99 range).
    # SMs: 132 of GH100's 144 (NVIDIA H100 Tensor Core GPU Architecture whitepaper: H100 SXM5
    # 132, H100 PCIe 114).
    GpuSpec("H100-SXM", _flops(989, 1979, 67), 79.19 * _GIB, 3.35e12, 450e9, 5e-6, 150, 700, 2.49, 132),
    # H200 SXM: H100 compute, 141 GB HBM3e at 4.8 TB/s; $2.25 is a vendor's on-demand claim
    # (hyperscalers quote $8-14), so it is optimistic.
    # SMs: 132, the H100 SXM5's GH100 configuration (same compute, new memory).
    GpuSpec("H200", _flops(989, 1979, 67), 139.8 * _GIB, 4.8e12, 450e9, 5e-6, 150, 700, 2.25, 132),
    # B200 (HGX, 1000 W): 180 GB visible; NVLink 5 1.8 TB/s bidir; $3.75 vendor claim.
    # SMs: 148 (two dies of 74 enabled SMs; Chips and Cheese, "Nvidia's B200", 2025).
    GpuSpec("B200", _flops(2250, 4500, 75), 179.0 * _GIB, 8.0e12, 900e9, 5e-6, 200, 1000, 3.75, 148),
    # B300 (HGX B300, Blackwell Ultra; not in gpu_specs.csv): NVIDIA's HGX B300 datasheet per
    # 8 GPUs: BF16 18 PFLOPS dense (2.25 per GPU), FP8 36 (4.5), FP4 108 (13.5, not a catalog
    # dtype: fp4 runs at the fp8 peak), 2.3 TB HBM3e (288 GB per GPU; 268 GiB visible,
    # approximate), 8 TB/s, NVLink 5 1.8 TB/s bidir; TDP 1100 W (1100-1400 W by
    # system). SMs: 148 assumed as B200's (the full two-die part has 160). Price: no published
    # quote, B200's x 1.2 as a placeholder. Kernel tables: its own (``perf.kernels``).
    GpuSpec("B300", _flops(2250, 4500, 75), 268.0 * _GIB, 8.0e12, 900e9, 5e-6, 220, 1100, 4.50, 148),
    # GB200 (one Blackwell GPU of a GB200 NVL72; not in gpu_specs.csv): NVIDIA's GB200 NVL72
    # spec per 72 GPUs: BF16 180 PFLOPS dense (2.5 per GPU), FP8 360 (5.0), 13.4 TB HBM3e
    # (186 GB per GPU; 184 GiB visible, approximate), 576 TB/s (8 TB/s per GPU), NVLink 5
    # 1.8 TB/s bidir; 1200 W per GPU (the superchip's 2700 W less the Grace CPU). SMs: 148
    # assumed as B200's. Its NVLink domain is the rack: 72 GPUs per node in ``_LINKS``.
    # Price: B200's x 1.2 as a placeholder. Kernel tables: its own (``perf.kernels``).
    GpuSpec("GB200", _flops(2500, 5000, 80), 184.0 * _GIB, 8.0e12, 900e9, 5e-6, 240, 1200, 4.50, 148),
    # MI300X: figures approximate (sources conflict); XGMI 896 GB/s; $1.71-1.85 -> 1.78.
    # Compute units: 304 (AMD Instinct MI300X datasheet).
    GpuSpec("MI300X", _flops(1300, 2610, 163.4), 191.5 * _GIB, 5.3e12, 448e9, 8e-6, 170, 750, 1.78, 304),
    # L40S PCIe: no NVLink, PCIe Gen4 x16 64 GB/s bidir. Price not in the CSV: a typical
    # on-demand quote (~$1/h), to be checked.
    # SMs: 142 (NVIDIA L40S datasheet: 18,176 CUDA cores = 142 x 128, 568 Tensor Cores = 142 x 4).
    GpuSpec("L40S", _flops(362, 733, 91.6), 44.4 * _GIB, 0.864e12, 32e9, 10e-6, 80, 350, 0.99, 142),
    # L4 PCIe: dense = half the sparse datasheet figures; PCIe Gen4 x16 assumed like L40S.
    # Price not in the CSV: a typical cloud quote (~$0.70/h), to be checked.
    # SMs: 58 (NVIDIA L4 datasheet: 7,424 CUDA cores = 58 x 128; some third-party tables list 60).
    GpuSpec("L4", _flops(121, 242.5, 30.3), 22.0 * _GIB, 0.300e12, 32e9, 10e-6, 16, 72, 0.70, 58),
)

#: Host<->GPU bandwidth classes (bytes/s per direction; ``GpuSpec.host_bw``). PCIe Gen4 x16:
#: 32 GB/s raw, ~25 GB/s measured with pinned memory (CUDA's bandwidthTest class of figure).
#: PCIe Gen5 x16: 64 GB/s raw; NVIDIA's NVbandwidth blog ("NVbandwidth: your essential tool to
#: measure GPU interconnect and memory performance") shows host_to_device_memcpy_ce at 55.63 GB/s.
#: NVLink-C2C (GH200/GB200): 900 GB/s bidirectional between the Grace CPU and its GPUs, 450 GB/s
#: a direction; a GB200 superchip's two GPUs share it (225 GB/s each when both copy), a
#: spec-sheet figure, not a measurement. MI300X and B300: the PCIe Gen5 class, assumed.
_HOST_LINK = {"pcie4": 25e9, "pcie5": 55.6e9, "c2c_gb200": 225e9}
_HOST_LINK_OF = {
    "A100-80GB": "pcie4",
    "H100-SXM": "pcie5",
    "H200": "pcie5",
    "B200": "pcie5",
    "B300": "pcie5",
    "GB200": "c2c_gb200",
    "MI300X": "pcie5",
    "L40S": "pcie4",
    "L4": "pcie4",
}
#: Host memory per GPU (bytes; ``GpuSpec.host_mem_bytes``): the system memory of a reference
#: node over its GPUs. NVIDIA DGX A100 (80GB), DGX H100, DGX H200, DGX B200 and DGX B300: 2 TB
#: of DDR5/DDR4 for 8 GPUs (their datasheets; B200/B300 configurable to 4 TB); GB200 NVL72:
#: 480 GB of LPDDR5X per Grace CPU shared by its 2 GPUs (NVIDIA's GB200 NVL72 spec: 17 TB for
#: 36 Grace CPUs, the rest being the GPUs' own HBM counted by some tables); MI300X: the 2 TB of
#: an 8-GPU OAM server (AMD's MI300X platform reference, assumed); L40S: AWS g6e.48xlarge's
#: 1,536 GiB for 8 GPUs; L4: AWS g6.48xlarge's 768 GiB for 8. Servers are sold with other
#: amounts: a node with more memory is a custom GPU (``hardware.gpu`` as a mapping).
_HOST_MEM = {
    "A100-80GB": 256 * _GIB,
    "H100-SXM": 256 * _GIB,
    "H200": 256 * _GIB,
    "B200": 256 * _GIB,
    "B300": 256 * _GIB,
    "GB200": 240 * _GIB,
    "MI300X": 256 * _GIB,
    "L40S": 192 * _GIB,
    "L4": 96 * _GIB,
}
_GPUS = tuple(
    replace(g, host_bw=_HOST_LINK[_HOST_LINK_OF[g.name]], host_mem_bytes=_HOST_MEM[g.name]) for g in _GPUS
)

_BY_NAME = {g.name: g for g in _GPUS}
_ALIASES = {
    "a100": "A100-80GB",
    "a10080gb": "A100-80GB",
    "a100sxm": "A100-80GB",
    "a100sxm480gb": "A100-80GB",
    "h100": "H100-SXM",
    "h100sxm": "H100-SXM",
    "h10080gb": "H100-SXM",
    "h100sxm5": "H100-SXM",
    "h100sxm80gb": "H100-SXM",
    "h200": "H200",
    "h200sxm": "H200",
    "h200141gb": "H200",
    "b200": "B200",
    "b200sxm": "B200",
    "b300": "B300",
    "b300sxm": "B300",
    "gb200": "GB200",
    "gb200nvl72": "GB200",
    "mi300x": "MI300X",
    "l40s": "L40S",
    "l4": "L4",
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def list_gpus() -> list[str]:
    return [g.name for g in _GPUS]


def gpu_from_config(cfg: GpuConfig) -> GpuSpec:
    """A user-defined GPU. FP32 is not given there; it is taken as 1/16 of BF16 (H100: 67/989)."""
    bf16 = cfg.bf16_tflops
    return GpuSpec(
        name=cfg.name,
        peak_flops=_flops(bf16, cfg.fp8_tflops, bf16 / 16),
        mem_bytes=cfg.mem_gb * 1e9,
        mem_bw=cfg.mem_bw_tb_per_s * 1e12,
        interconnect_bw=cfg.interconnect_gb_per_s * 1e9,
        interconnect_latency_s=cfg.interconnect_latency_us * 1e-6,
        idle_power_w=cfg.idle_power_w,
        max_power_w=cfg.max_power_w,
        usd_per_hour=cfg.usd_per_hour,
    )


def get_gpu(name_or_config: str | GpuConfig) -> GpuSpec:
    """A catalog GPU by name (case-insensitive, aliases like 'h100', 'a100') or a custom GpuConfig."""
    if not isinstance(name_or_config, str):
        return gpu_from_config(name_or_config)
    key = _key(name_or_config)
    for g in _GPUS:
        if _key(g.name) == key:
            return g
    if key in _ALIASES:
        return _BY_NAME[_ALIASES[key]]
    by_upper = {n.upper(): n for n in list_gpus()}
    close = [
        by_upper[c]
        for c in difflib.get_close_matches(name_or_config.upper(), list(by_upper), n=3, cutoff=0.4)
    ]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise CatalogError(
        f"unknown GPU {name_or_config!r}{hint} Known: {', '.join(list_gpus())} "
        "(or define one under hardware.gpu with bf16_tflops, mem_gb, mem_bw_tb_per_s)"
    )


# --------------------------------------------------------------------------- links


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """The links a GPU's server gives it. Bytes/s unidirectional per GPU, seconds.

    ``intra_*``: GPU to GPU inside a node (NVLink/NVSwitch, xGMI or PCIe), used by tensor
    parallelism and by pipeline stages on one node. ``inter_*``: the GPU's share of the
    scale-out network between nodes (InfiniBand/RoCE; one NIC per GPU as in DGX/HGX
    servers: 400 Gb/s NDR = 50 GB/s), used by groups that span nodes and by KV-cache
    transfers between replicas. ``inter_latency_s`` is NCCL-level small-message latency
    over IB (~5-10 us), not the wire's ~1 us.
    """

    intra_kind: str
    intra_bw: float
    intra_latency_s: float
    inter_kind: str
    inter_bw: float
    inter_latency_s: float
    gpus_per_node: int = 8


# name -> (intra kind, inter kind, inter bytes/s, gpus per node); intra bandwidth and
# latency are the GpuSpec's interconnect figures so that TP inside a node is unchanged.
_LINKS: dict[str, tuple[str, str, float, int]] = {
    "A100-80GB": ("NVLink3", "InfiniBand HDR 200G", 25e9, 8),
    "H100-SXM": ("NVLink4", "InfiniBand NDR 400G", 50e9, 8),
    "H200": ("NVLink4", "InfiniBand NDR 400G", 50e9, 8),
    "B200": ("NVLink5", "InfiniBand NDR 400G", 50e9, 8),
    "B300": ("NVLink5", "InfiniBand XDR 800G", 100e9, 8),
    "GB200": ("NVLink5 (NVL72)", "InfiniBand NDR 400G", 50e9, 72),
    "MI300X": ("xGMI", "RoCE 400G", 50e9, 8),
    "L40S": ("PCIe Gen4 x16", "Ethernet 200G", 25e9, 8),
    "L4": ("PCIe Gen4 x16", "Ethernet 100G", 12.5e9, 8),
}
_NET_LATENCY_S = 8e-6


def link_spec(
    gpu: GpuSpec,
    intra_bw: float | None = None,
    intra_latency_s: float | None = None,
    inter_bw: float | None = None,
    inter_latency_s: float | None = None,
    gpus_per_node: int | None = None,
) -> LinkSpec:
    """The catalog links of ``gpu`` (a custom GPU: its interconnect and a 400G network), with
    any figure overridden (None keeps the catalog's)."""
    intra_kind, inter_kind, net_bw, per_node = _LINKS.get(gpu.name, ("custom", "network 400G", 50e9, 8))
    return LinkSpec(
        intra_kind=intra_kind,
        intra_bw=gpu.interconnect_bw if intra_bw is None else intra_bw,
        intra_latency_s=gpu.interconnect_latency_s if intra_latency_s is None else intra_latency_s,
        inter_kind=inter_kind,
        inter_bw=net_bw if inter_bw is None else inter_bw,
        inter_latency_s=_NET_LATENCY_S if inter_latency_s is None else inter_latency_s,
        gpus_per_node=per_node if gpus_per_node is None else gpus_per_node,
    )
