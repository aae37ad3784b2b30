"""Pack the fused-MoE tables of the kernels vLLM serves 4-bit and block-FP8 experts with on Blackwell.

The kernel tables ``tools/pack_kernels.py`` packs (vLLM 0.14.0 and 0.19.0) time one MoE
kernel per expert dtype; for MXFP4 experts on B200 that is not the kernel vLLM serves
(``servesim.perf.kernel_moe``, ``UNSERVED``). AIConfigurator's vLLM 0.24.0 MoE table of
B200, at the same source commit, names the kernel of each row (its ``kernel_source``) and
has the two FlashInfer TRTLLM-gen MXFP4 kernels vLLM picks on SM100 (``Mxfp4Backend``) and
the Marlin MoE it runs int4 experts with (B200's own int4 tables of vLLM 0.19.0 time
Triton's W4A16 ``fused_experts`` under the Marlin name):

- ``flashinfer_trtllm_mxfp4_bf16``: MXFP4 weights, 16-bit activations (vLLM's default on
  SM100, ``SM100_FI_MXFP4_BF16``), measured at gpt-oss's expert shapes;
- ``flashinfer_trtllm_mxfp4_mxfp8``: MXFP4 weights, MXFP8 activations
  (``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``), measured at two DeepSeek-like shapes;
- ``marlin_int4``: vLLM's ``CompressedTensorsWNA16MarlinMoEMethod`` (``fused_marlin_moe``),
  int4 weights and 16-bit activations, measured at Kimi-K2.5's expert shape;
- ``flashinfer_trtllm_fp8_block``: FlashInfer's TRTLLM-gen MoE of block-FP8 experts (128 x
  128 weight blocks, activations quantized per 128), its monolithic kernel (routing inside),
  which vLLM's FP8 MoE oracle picks first on SM100 (``Fp8MoeBackend.FLASHINFER_TRTLLM``);
  the packed B200 tables of vLLM 0.19.0 time Triton's ``fused_experts`` for block FP8, the
  kernel of runs that set ``VLLM_USE_FLASHINFER_MOE_FP8=0``. Measured at 17 shapes
  (MiniMax-M2's 3072 x 1536 top-8 of 256, DeepSeek-V3's 7168 x 2048 top-8 of 256, ...).

This tool writes their rows of token distribution ``power_law_1.01`` (as the packed
tables) into ``src/servesim/data/kernels/served_moe.json``: per kernel and (shape, moe_tp,
moe_ep), the token counts and latencies in milliseconds as measured (repeats averaged,
nothing fitted). The installed package reads only that file.

    python tools/pack_served_moe.py AICONFIGURATOR_REPO [--rev REV]

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

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "kernels" / "served_moe.json"
TABLE = "aic-core/src/aiconfigurator_core/systems/data/{gpu}/moe/vllm/{version}/moe_perf.parquet"
DISTRIBUTION = "power_law_1.01"
#: (GPU folder, vLLM version, the table's kernel_source) -> the kernel's name in servesim.
SERVED = {
    (
        "b200_sxm",
        "0.24.0",
        "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
    ): "flashinfer_trtllm_mxfp4_bf16",
    (
        "b200_sxm",
        "0.24.0",
        "vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8_trtllmmxfp4expertsmodular",
    ): "flashinfer_trtllm_mxfp4_mxfp8",
    ("b200_sxm", "0.24.0", "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"): "marlin_int4",
    (
        "b200_sxm",
        "0.24.0",
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
    ): "flashinfer_trtllm_fp8_block",
}


def pack(repo: Path, rev: str) -> dict[str, Any]:
    commit = git(repo, "rev-parse", rev).decode().strip()
    tables: list[dict[str, Any]] = []
    for (gpu, version), kernels in sorted(_by_table().items()):
        path = TABLE.format(gpu=gpu, version=version)
        rows = pq.read_table(io.BytesIO(git(repo, "show", f"{commit}:{path}"))).to_pylist()
        for source, name in sorted(kernels.items()):
            sums: dict[tuple[int, ...], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
            dtypes = set()
            for r in rows:
                if r["kernel_source"] == source and r["distribution"] == DISTRIBUTION:
                    key = (
                        r["hidden_size"],
                        r["inter_size"],
                        r["topk"],
                        r["num_experts"],
                        r["moe_tp_size"],
                        r["moe_ep_size"],
                    )
                    sums[key][int(r["num_tokens"])].append(float(r["latency"]))
                    dtypes.add(r["moe_dtype"])
            if not sums:
                raise SystemExit(f"{path}: no {DISTRIBUTION} row of {source}")
            series = [
                {
                    "shape": list(k[:4]),
                    "moe_tp": k[4],
                    "moe_ep": k[5],
                    "tokens": sorted(pts),
                    "latency_ms": [round(sum(pts[t]) / len(pts[t]), 6) for t in sorted(pts)],
                }
                for k, pts in sorted(sums.items())
            ]
            tables.append(
                {
                    "gpu": gpu,
                    "vllm_version": version,
                    "kernel": name,
                    "kernel_source": source,
                    "moe_dtype": sorted(dtypes),
                    "table": path,
                    "series": series,
                }
            )
    return {
        "source": "NVIDIA AIConfigurator, github.com/ai-dynamo/aiconfigurator (Apache-2.0), "
        "copyright NVIDIA CORPORATION & AFFILIATES",
        "commit": commit,
        "distribution": DISTRIBUTION,
        "tables": tables,
    }


def _by_table() -> dict[tuple[str, str], dict[str, str]]:
    out: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for (gpu, version, source), name in SERVED.items():
        out[(gpu, version)][source] = name
    return out


def main(argv: list[str] | None = None) -> int:
    def summary(d: dict[str, Any]) -> str:
        return f"{sum(len(t['series']) for t in d['tables'])} series of {len(d['tables'])} kernels"

    return run(__doc__, pack, OUT, summary, argv)


if __name__ == "__main__":
    raise SystemExit(main())
