"""Splitwise's own measurements of Llama-2-70B at TP8 on a DGX-A100 and a DGX-H100
(``data/perf_model.csv`` of Mutinifni/splitwise-sim at 8f99e7d, bundled with servesim's
validation data) as a step-time model (``SplitwisePerf``, read as ``papers.splitwise``'s
docstring says), and the A100/H100 decode-step ratio they measure beside servesim's
(``decode_ratio_rows``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import tarfile
from collections import defaultdict
from importlib import resources
from typing import Any

import numpy as np

from servesim.perf.base import BatchStats

#: The catalog GPUs Splitwise measured -> the ``hardware`` column of its table.
HW = {"A100-80GB": "a100-80gb", "H100-SXM": "h100-80gb"}


def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear interpolation, extrapolated past both ends (scipy's interp1d(fill_value="extrapolate"))."""
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = len(xs) - 2
    else:
        return float(np.interp(x, xs, ys))
    return float(ys[i] + (ys[i + 1] - ys[i]) * (x - xs[i]) / (xs[i + 1] - xs[i]))


@dataclasses.dataclass(frozen=True, slots=True)
class SplitwisePerf:
    """A step time from Splitwise's measurements of Llama-2-70B on one DGX (see the module
    docstring): prompt seconds by batch prompt tokens, token seconds by batch size."""

    prompt_x: np.ndarray
    prompt_s: np.ndarray
    token_x: np.ndarray
    token_s: np.ndarray

    def prompt_time(self, tokens: float) -> float:
        return _interp(tokens, self.prompt_x, self.prompt_s)

    def token_time(self, batch: float) -> float:
        return _interp(batch, self.token_x, self.token_s)

    def batch_time(self, s: BatchStats) -> float:
        if s.num_prefill_tokens == 0:
            return self.token_time(s.num_decode_reqs) if s.num_decode_reqs else 0.0
        t = self.prompt_time(s.num_prefill_tokens + s.num_decode_reqs)
        return t * 1.1 if s.num_decode_reqs else t

    def batch_flops(self, s: BatchStats) -> float:
        return 0.0

    def batch_bytes(self, s: BatchStats) -> float:
        return 0.0


def measurements() -> list[dict[str, str]]:
    """Splitwise's perf_model.csv, from servesim's bundled validation data."""
    from servesim.validate.common import BUNDLED_DATA

    ref = resources.files("servesim").joinpath("data", BUNDLED_DATA)
    with ref.open("rb") as f, tarfile.open(fileobj=f, mode="r:gz") as tar:
        member = tar.extractfile("data/measurements/splitwise/perf_model.csv")
        assert member is not None
        return list(csv.DictReader(io.TextIOWrapper(member, "utf-8")))


def perf_models(
    model: str = "llama2-70b", tp: int = 8, token_lookup: bool = False
) -> dict[str, SplitwisePerf]:
    """One ``SplitwisePerf`` per GPU of the catalog, from the measured medians (token time by
    batch size at 512-token prompts, or with ``token_lookup`` by prompt_size x batch_size of
    every row, as the artifact's predictor; see ``Semantics``)."""
    rows = measurements()
    out = {}
    for gpu, hw in HW.items():
        prompt: dict[int, list[float]] = defaultdict(list)
        token: dict[int, list[float]] = defaultdict(list)
        for r in rows:
            if r["model"] != model or r["hardware"] != hw or int(r["tensor_parallel"]) != tp:
                continue
            b, p = int(r["batch_size"]), int(r["prompt_size"])
            prompt[b * p].append(float(r["prompt_time"]) / 1e3)
            if token_lookup:
                token[b * p].append(float(r["token_time"]) / 1e3)
            elif p == 512:
                token[b].append(float(r["token_time"]) / 1e3)
        px = np.array(sorted(prompt), np.float64)
        tx = np.array(sorted(token), np.float64)
        out[gpu] = SplitwisePerf(
            px,
            np.array([np.median(prompt[int(x)]) for x in px]),
            tx,
            np.array([np.median(token[int(x)]) for x in tx]),
        )
    return out


#: The batch sizes Splitwise measured per-token time at (512-token prompts, TP8).
DECODE_BATCHES = (1, 8, 16, 32, 64)


def decode_ratio_rows() -> list[dict[str, Any]]:
    """A100 / H100 decode step of Llama-2-70B at TP8: servesim's default (kernel database) step
    per operator, against Splitwise's measured per-token time (the ratio the heterogeneous
    designs turn on; docs/papers.md)."""
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.perf.kernel_model import kernel_perf_model

    model = load_model("Llama-2-70B")
    kernels = {g: kernel_perf_model(model, get_gpu(g), None, tp=8) for g in HW}
    measured = perf_models()
    rows = []
    for b in DECODE_BATCHES:
        st = BatchStats(num_decode_reqs=b, sum_decode_context=b * (512 + 64))
        parts = {g: kernels[g].breakdown(st) for g in HW}
        step = {g: kernels[g].batch_time(st) for g in HW}
        row: dict[str, Any] = {"design": "decode_ratio", "batch": b}
        for op in parts["A100-80GB"]:
            a, h = parts["A100-80GB"][op], parts["H100-SXM"].get(op, 0.0)
            row[f"{op}_a100_ms"], row[f"{op}_h100_ms"] = a * 1e3, h * 1e3
        row["servesim_a100_ms"], row["servesim_h100_ms"] = step["A100-80GB"] * 1e3, step["H100-SXM"] * 1e3
        row["servesim_ratio"] = step["A100-80GB"] / step["H100-SXM"]
        ma, mh = measured["A100-80GB"].token_time(b), measured["H100-SXM"].token_time(b)
        row["splitwise_a100_ms"], row["splitwise_h100_ms"] = ma * 1e3, mh * 1e3
        row["splitwise_ratio"] = ma / mh
        rows.append(row)
    return rows
