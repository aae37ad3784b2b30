"""Fit servesim's GPU power model to the Splitwise measurements and bundle the coefficients.

Usage::

    python tools/fit_power.py PATH/TO/splitwise/perf_model.csv src/servesim/data/power_model.json

The csv (Splitwise project, MIT) holds, per model, GPU, tensor parallelism, prompt size,
batch size and output length, the end-to-end time of a batch and the GPU's average power
over it as a fraction of its TDP (power is logged for the DGX-A100 rows only; the H100 rows
carry 0). The model fitted is the one ``servesim.perf.power`` prices steps with::

    P / TDP = a + c * flops / (peak_flops * t) + m * bytes / (hbm_bw * t)

per GPU while a step runs, so a run's energy is ``TDP * (a * t + c * F / peak + m * B / bw)``
and its average power is linear in the run's compute and memory utilization: an ordinary
least-squares fit. ``F`` and ``B`` are counted per GPU as the roofline counts them (dense
weights ``2 N`` FLOPs per token, weights read once per step, the KV cache read by decodes).

Rows whose average power is below 0.25 of TDP while their peak reaches the TDP are left
out: the 8192-token prompts of Llama-2-70B (all three TP degrees), whose average is below
the A100's idle draw, so the power log missed the run. The held-out errors are measured
by fitting on Llama-2-70B and predicting BLOOM-176B, and by fitting on TP 2 and 4 and
predicting TP 8. The clock model is checked on the H100 and power-capped H100 timings.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

# Architecture facts of the two models (their Hugging Face config.json files):
# parameters, layers, KV heads x head dim (BLOOM is multi-head: 112 x 128).
MODELS = {
    "llama2-70b": {"params": 68.98e9, "layers": 80, "kv_dim": 8 * 128},
    "bloom-176b": {"params": 176.25e9, "layers": 70, "kv_dim": 112 * 128},
}
A100 = {"peak_flops": 312e12, "hbm_bw": 2.039e12}  # dense BF16, SXM4 80GB (catalog's A100-80GB)
MIN_AVG_POWER = 0.25  # of TDP; below it the log missed the run (see the module docstring)


def read_rows(path: Path) -> list[dict]:
    """One row per measured configuration (its repetitions averaged)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    with path.open() as f:
        for r in csv.DictReader(f):
            key = (
                r["model"],
                r["hardware"],
                int(r["tensor_parallel"]),
                int(r["prompt_size"]),
                int(r["batch_size"]),
                int(r["token_size"]),
            )
            groups[key].append(r)
    out = []
    for (model, hw, tp, prompt, batch, tokens), rs in sorted(groups.items()):

        def mean(col: str, rs: list[dict] = rs) -> float:
            return float(np.mean([float(r[col]) for r in rs]))

        out.append(
            {
                "model": model,
                "hardware": hw,
                "tp": tp,
                "prompt": prompt,
                "batch": batch,
                "tokens": tokens,
                "avg_power": mean("average_power"),
                "peak_power": mean("peak_power"),
                "prompt_ms": mean("prompt_time"),
                "token_ms": mean("token_time"),
                "e2e_ms": mean("e2e_time"),
            }
        )
    return out


def work_per_gpu(row: dict) -> tuple[float, float]:
    """(FLOPs, HBM bytes) one GPU does over the measured run (BF16 weights and KV)."""
    m = MODELS[row["model"]]
    tp, b, p, n = row["tp"], row["batch"], row["prompt"], row["tokens"]
    weights = 2.0 * m["params"] / tp
    flops = 2.0 * m["params"] / tp * b * (p + n)
    kv_token = 2 * 2 * m["layers"] * m["kv_dim"] / tp  # K and V, 2 bytes, this GPU's shard
    mean_ctx = p + n / 2
    bytes_ = weights * (1 + n) + b * n * mean_ctx * kv_token + b * p * kv_token
    return flops, bytes_


def features(rows: list[dict]) -> np.ndarray:
    x = []
    for r in rows:
        f, b = work_per_gpu(r)
        t = r["e2e_ms"] / 1e3
        x.append([1.0, f / (A100["peak_flops"] * t), b / (A100["hbm_bw"] * t)])
    return np.array(x)


def fit(rows: list[dict]) -> np.ndarray:
    coef, *_ = np.linalg.lstsq(features(rows), np.array([r["avg_power"] for r in rows]), rcond=None)
    return coef


def mae(coef: np.ndarray, rows: list[dict]) -> float:
    pred = features(rows) @ coef
    return float(np.mean(np.abs(pred - np.array([r["avg_power"] for r in rows]))))


def clock_fit(rows: list[dict]) -> dict[str, float]:
    """Prefill and decode slowdowns of the power-capped H100 against the H100 (same configs)."""
    by = {(r["model"], r["tp"], r["prompt"], r["batch"], r["tokens"], r["hardware"]): r for r in rows}
    pre, dec = [], []
    for (model, tp, p, b, n, hw), r in by.items():
        if hw != "h100-80gb-pcap":
            continue
        base = by.get((model, tp, p, b, n, "h100-80gb"))
        if base is not None:
            pre.append(r["prompt_ms"] / base["prompt_ms"])
            dec.append(r["token_ms"] / base["token_ms"])
    return {
        "prefill_slowdown": float(np.median(pre)),
        "decode_slowdown": float(np.median(dec)),
        "num_pairs": len(pre),
    }


def main(src: str, dst: str) -> None:
    rows = read_rows(Path(src))
    powered = [r for r in rows if r["hardware"] == "a100-80gb" and r["avg_power"] >= MIN_AVG_POWER]
    llama = [r for r in powered if r["model"] == "llama2-70b"]
    bloom = [r for r in powered if r["model"] == "bloom-176b"]
    low_tp = [r for r in powered if r["tp"] < 8]
    tp8 = [r for r in powered if r["tp"] == 8]
    coef = fit(powered)
    clock = clock_fit(rows)
    out = {
        "source": "Splitwise perf_model.csv (github.com/Mutinifni/splitwise-sim, MIT), DGX-A100 rows",
        "model": (
            "P/TDP = active + compute * flops/(peak*t) + memory * bytes/(bw*t), per GPU while a step runs"
        ),
        "active": round(float(coef[0]), 4),
        "compute": round(float(coef[1]), 4),
        "memory": round(float(coef[2]), 4),
        "num_rows": len(powered),
        "fit_mae": round(mae(coef, powered), 4),
        "held_out_mae": {
            "fit_llama2_70b_predict_bloom_176b": round(mae(fit(llama), bloom), 4),
            "fit_tp2_tp4_predict_tp8": round(mae(fit(low_tp), tp8), 4),
        },
        "clock": {k: round(v, 4) if isinstance(v, float) else v for k, v in clock.items()},
    }
    Path(dst).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: fit_power.py perf_model.csv power_model.json")
    main(sys.argv[1], sys.argv[2])
