"""Pack NVIDIA AIConfigurator's measured vLLM kernel latencies into servesim's package data.

Reads the parquet tables of an AIConfigurator kernel database (``kernels/<gpu>/<op>/...``)
and writes one compressed ``<gpu>_<vllm version>.npz`` per GPU and vLLM version under
``src/servesim/data/kernels/``, which ``servesim.perf.kernels.KernelDatabase`` reads. The
installed package reads only those files, never the source tables.

Each table becomes dense arrays on sorted grid axes, latencies in milliseconds as float32
(NaN where the source has no measurement, the mean where it repeats one; nothing is
filled or smoothed here):

- ``gemm.<dtype>.{m,n,k,lat}``: ``lat[i, j, l]`` of an (m x k) @ (k x n) GEMM;
- ``ctx.{batch,isl,keys,lat}`` and ``gen.{batch,ctx,keys,lat}``: prefill and decode
  attention, one 2-D (batch, length) grid per shape class ``keys[c] = (kv cache dtype code,
  head_dim, num_heads, num_kv_heads, window_size)``; ``gen.ctx`` is the sequence length the
  decode attends to (the source's ``step`` + 1, the new token included);
- ``ar.{num_gpus,size,lat}``: vLLM's custom all-reduce, ``lat[backend, gpus, size]`` with
  backend 0 = inside a CUDA graph, 1 = eager; sizes in bf16 elements;
- ``nccl.{ops,num_gpus,size,lat}``: NCCL collectives in half precision, ``lat[op, gpus, size]``;
- ``moe.{tokens,keys,lat}``: fused MoE, one row per shape ``keys[s] = (hidden, inter, topk,
  num_experts, moe_tp, moe_ep, dtype code)``, token distribution ``MOE_DISTRIBUTION``.

Float arrays are stored byte-planed (the four bytes of every float32 in four runs), which
roughly halves the compressed size of smooth latency grids; ``KernelDatabase`` undoes it.

    python tools/pack_kernels.py [SOURCE_DIR]   # default: ../shared/data/measurements/aiconfigurator

``SOURCE_DIR/kernels/<gpu>/<op>/vllm/<version>/*.parquet`` (and ``comm/nccl/<version>/``).
The packed B300 and GB200 files come from AIConfigurator's repository at the same commit
(``aic-core/src/aiconfigurator_core/systems/data/{b300_sxm,gb200}/``, their vLLM 0.19.0
GEMM, attention, MoE and all-reduce tables and NCCL folders), copied into such a folder
beside the other GPUs'.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "kernels"
#: Dtype names as codes in the key arrays (the reader has the same tuple).
DTYPES = ("bfloat16", "fp8", "fp8_block", "nvfp4", "int4_wo", "w4a16_mxfp4", "float16")
#: The token-to-expert distribution packed from the MoE tables (the source measures
#: balanced, power_law_1.01 and power_law_1.2 routing; the A100 tables lack balanced).
MOE_DISTRIBUTION = "power_law_1.01"
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


def _read(path: Path, cols: list[str]) -> dict[str, np.ndarray]:
    t = pq.read_table(path, columns=[c for c in cols if c in pq.read_schema(path).names])
    return {c: np.asarray(t.column(c).to_pylist()) for c in t.column_names}


def _planes(a: np.ndarray) -> np.ndarray:
    """float32 array -> (4, N) uint8: byte i of every element in row i."""
    flat = np.ascontiguousarray(a, np.float32).reshape(-1)
    return np.ascontiguousarray(flat.view(np.uint8).reshape(-1, 4).T)


def _put(shape: tuple[int, ...], idx: tuple[np.ndarray, ...], lat: np.ndarray) -> np.ndarray:
    """A float32 grid of ``shape`` with ``lat`` at ``idx``: NaN where nothing was measured,
    the mean where the source repeats a measurement (its context-attention and MoE tables do)."""
    total, count = np.zeros(shape), np.zeros(shape)
    np.add.at(total, idx, lat)
    np.add.at(count, idx, 1.0)
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, total / count, np.nan).astype(np.float32)


def _grid(axes: list[np.ndarray], cols: list[np.ndarray], lat: np.ndarray) -> np.ndarray:
    return _put(tuple(len(a) for a in axes), tuple(np.searchsorted(a, c) for a, c in zip(axes, cols)), lat)


def pack_gemm(path: Path, arrays: dict[str, np.ndarray]) -> None:
    d = _read(path, ["gemm_dtype", "m", "n", "k", "latency"])
    for dt in sorted(set(d["gemm_dtype"].tolist())):
        s = d["gemm_dtype"] == dt
        axes = [np.unique(d[a][s]) for a in ("m", "n", "k")]
        arrays.update({f"gemm.{dt}.m": axes[0], f"gemm.{dt}.n": axes[1], f"gemm.{dt}.k": axes[2]})
        arrays[f"gemm.{dt}.lat"] = _grid(axes, [d[a][s] for a in ("m", "n", "k")], d["latency"][s])


def pack_attention(path: Path, prefix: str, arrays: dict[str, np.ndarray]) -> None:
    d = _read(
        path,
        [
            "batch_size",
            "isl",
            "step",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "window_size",
            "kv_cache_dtype",
            "latency",
        ],
    )
    n = len(d["latency"])
    window = d.get("window_size", np.zeros(n, np.int64))
    length = d["isl"] if prefix == "ctx" else d["step"] + 1
    kv = np.array([DTYPES.index(x) for x in d["kv_cache_dtype"]])
    keys = np.stack([kv, d["head_dim"], d["num_heads"], d["num_key_value_heads"], window], axis=1)
    classes, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    batch, lens = np.unique(d["batch_size"]), np.unique(length)
    lat = _put(
        (len(classes), len(batch), len(lens)),
        (inv, np.searchsorted(batch, d["batch_size"]), np.searchsorted(lens, length)),
        d["latency"],
    )
    arrays.update(
        {
            f"{prefix}.batch": batch,
            f"{prefix}.{'isl' if prefix == 'ctx' else 'ctx'}": lens,
            f"{prefix}.keys": classes.astype(np.int32),
            f"{prefix}.lat": lat,
        }
    )


def pack_allreduce(path: Path, arrays: dict[str, np.ndarray]) -> None:
    d = _read(path, ["backend", "num_gpus", "message_size", "latency"])
    gpus, sizes = np.unique(d["num_gpus"]), np.unique(d["message_size"])
    b = np.array([("vllm_graph", "vllm_eager").index(x) for x in d["backend"]])
    lat = _put(
        (2, len(gpus), len(sizes)),
        (b, np.searchsorted(gpus, d["num_gpus"]), np.searchsorted(sizes, d["message_size"])),
        d["latency"],
    )
    arrays.update({"ar.num_gpus": gpus, "ar.size": sizes, "ar.lat": lat})


def pack_nccl(path: Path, arrays: dict[str, np.ndarray]) -> str:
    d = _read(path, ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
    s = d["nccl_dtype"] == "half"
    gpus, sizes = np.unique(d["num_gpus"][s]), np.unique(d["message_size"][s])
    ops = [o for o in NCCL_OPS if o in set(d["op_name"][s].tolist())]
    keep = s & np.isin(d["op_name"], ops)
    lat = _put(
        (len(ops), len(gpus), len(sizes)),
        (
            np.array([ops.index(o) for o in d["op_name"][keep]]),
            np.searchsorted(gpus, d["num_gpus"][keep]),
            np.searchsorted(sizes, d["message_size"][keep]),
        ),
        d["latency"][keep],
    )
    arrays.update({"nccl.ops": np.array(ops), "nccl.num_gpus": gpus, "nccl.size": sizes, "nccl.lat": lat})
    return path.parent.name


def pack_moe(path: Path, arrays: dict[str, np.ndarray]) -> None:
    cols = ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    d = _read(path, [*cols, "moe_dtype", "num_tokens", "distribution", "latency"])
    s = d["distribution"] == MOE_DISTRIBUTION
    dt = np.array([DTYPES.index(x) for x in d["moe_dtype"][s]])
    keys = np.stack([*(d[c][s] for c in cols), dt], axis=1)
    shapes, inv = np.unique(keys, axis=0, return_inverse=True)
    tokens = np.unique(d["num_tokens"][s])
    lat = _put(
        (len(shapes), len(tokens)),
        (inv.reshape(-1), np.searchsorted(tokens, d["num_tokens"][s])),
        d["latency"][s],
    )
    arrays.update({"moe.tokens": tokens, "moe.keys": shapes.astype(np.int32), "moe.lat": lat})


def pack_one(src: Path, gpu: str, version: str) -> dict[str, object]:
    root = src / "kernels" / gpu
    arrays: dict[str, np.ndarray] = {}
    tables = []
    for rel, fn in (
        ("gemm/vllm/{v}/gemm_perf.parquet", lambda p: pack_gemm(p, arrays)),
        ("attention/vllm/{v}/context_attention_perf.parquet", lambda p: pack_attention(p, "ctx", arrays)),
        ("attention/vllm/{v}/generation_attention_perf.parquet", lambda p: pack_attention(p, "gen", arrays)),
        ("comm/vllm/{v}/custom_allreduce_perf.parquet", lambda p: pack_allreduce(p, arrays)),
        ("moe/vllm/{v}/moe_perf.parquet", lambda p: pack_moe(p, arrays)),
    ):
        p = root / rel.format(v=version)
        if p.is_file():
            fn(p)
            tables.append(str(p.relative_to(src)))
    nccl = sorted((root / "comm" / "nccl").glob("*/nccl_perf.parquet"))
    nccl_version = pack_nccl(nccl[-1], arrays) if nccl else None
    if nccl:
        tables.append(str(nccl[-1].relative_to(src)))
    meta = {
        "gpu": gpu,
        "vllm_version": version,
        "nccl_version": nccl_version,
        "tables": tables,
        "moe_distribution": MOE_DISTRIBUTION,
        "dtypes": list(DTYPES),
        "float_arrays": sorted(k for k, v in arrays.items() if v.dtype == np.float32),
    }
    stored = {k: (_planes(v) if v.dtype == np.float32 else v) for k, v in arrays.items()}
    stored["meta"] = np.array(json.dumps(meta))
    stored.update({f"shape.{k}": np.array(v.shape) for k, v in arrays.items() if v.dtype == np.float32})
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{gpu}_{version}.npz"
    np.savez_compressed(out, **stored)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    return {"file": out.name, "bytes": out.stat().st_size, "sha256": digest, **meta}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "measurements" / "aiconfigurator"
    ap.add_argument("source", nargs="?", type=Path, default=default)
    a = ap.parse_args()
    if not (a.source / "kernels").is_dir():
        sys.exit(f"{a.source}: no kernels/ folder (give the AIConfigurator data directory)")
    index = []
    for gpu_dir in sorted((a.source / "kernels").iterdir()):
        versions = sorted({p.name for p in gpu_dir.glob("*/vllm/*") if p.is_dir()})
        for v in versions:
            info = pack_one(a.source, gpu_dir.name, v)
            index.append({k: info[k] for k in ("file", "gpu", "vllm_version", "nccl_version", "tables")})
            print(f"{info['file']:>24} {info['bytes'] / 1e3:8.1f} kB")
    (OUT / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"total {sum(p.stat().st_size for p in OUT.glob('*.npz')) / 1e6:.2f} MB in {OUT}")


if __name__ == "__main__":
    main()
