"""Pack AIConfigurator's measured MLA attention modules (prefill) into the package.

The kernel tables ``tools/pack_kernels.py`` packs time GQA attention only; an MLA prefill
(multi-head attention at head size 192 over the up-projected latent) had no table and was
priced by the roofline. AIConfigurator's collection, at the same source commit, has vLLM
0.19.0 tables of the whole MLA attention module of a DeepSeek-V3 layer
(``mla/vllm/0.19.0/mla_context_module_perf.parquet``, its ``collect_mla_module.py``:
vLLM's own ``DeepseekV2MLAAttention`` with dummy weights, forward timed: the latent and
query projections and their norms, the key and value up-projection, rotary, the cache
write, the attention and the output projection) for B200, H200 and H100, by KV-cache dtype,
the linear layers' dtype (``gemm_type``), the heads on the rank (1-128), the batch (1-256
prompts) and the prompt length (1-32768, no prefix).

This tool writes them into ``src/servesim/data/kernels/mla_context.json``: per GPU folder and
(KV dtype, GEMM dtype, heads), the batch and length axes and the latencies in milliseconds
(repeats averaged, 4 significant digits, nothing fitted), with the module's shape. The
installed package reads only that file (``servesim.perf.kernel_mla``).

    python tools/pack_mla_module.py AICONFIGURATOR_REPO [--rev REV]

``AICONFIGURATOR_REPO`` is a clone of github.com/ai-dynamo/aiconfigurator (a bare one
does); the tables are read from ``REV`` (default HEAD) with ``git show``.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from _aic import git, run

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "kernels" / "mla_context.json"
TABLE = (
    "aic-core/src/aiconfigurator_core/systems/data/{gpu}/mla/vllm/{version}/mla_context_module_perf.parquet"
)
GPUS = ("b200_sxm", "h200_sxm", "h100_sxm")
VERSION = "0.19.0"
#: The module the collector builds: DeepSeek-V3's attention (hidden, q_lora_rank,
#: kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim), with the heads varied.
MODULE = {
    "model": "deepseek-ai/DeepSeek-V3",
    "hidden_size": 7168,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def pack_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One GPU's table: {"kv|gemm|heads": {"batch": [...], "isl": [...], "latency_ms": [[...]]}}."""
    sums: dict[str, dict[tuple[int, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["model"] != MODULE["model"] or int(r["tp_size"]) != 1:
            raise SystemExit(f"unexpected row: model {r['model']}, tp_size {r['tp_size']}")
        key = f"{r['kv_cache_dtype']}|{r['gemm_type']}|{int(r['num_heads'])}"
        sums[key][(int(r["batch_size"]), int(r["isl"]))].append(float(r["latency"]))
    out: dict[str, Any] = {}
    for key, pts in sorted(sums.items()):
        batch = sorted({b for b, _ in pts})
        isl = sorted({s for _, s in pts})
        lat = [
            [_sig(sum(pts[(b, s)]) / len(pts[(b, s)])) if (b, s) in pts else None for s in isl] for b in batch
        ]
        out[key] = {"batch": batch, "isl": isl, "latency_ms": lat}
    return out


def pack(repo: Path, rev: str) -> dict[str, Any]:
    commit = git(repo, "rev-parse", rev).decode().strip()
    gpus = {}
    for gpu in GPUS:
        path = TABLE.format(gpu=gpu, version=VERSION)
        rows = pq.read_table(io.BytesIO(git(repo, "show", f"{commit}:{path}"))).to_pylist()
        gpus[gpu] = {"table": path, "series": pack_rows(rows)}
    return {
        "source": "NVIDIA AIConfigurator, github.com/ai-dynamo/aiconfigurator (Apache-2.0), "
        "copyright NVIDIA CORPORATION & AFFILIATES",
        "commit": commit,
        "vllm_version": VERSION,
        "module": MODULE,
        "gpus": gpus,
    }


def main(argv: list[str] | None = None) -> int:
    def summary(d: dict[str, Any]) -> str:
        return f"{sum(len(g['series']) for g in d['gpus'].values())} series of {len(d['gpus'])} GPUs"

    return run(__doc__, pack, OUT, summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())
