"""Suites on published GPU measurements: Vidur operators, Splitwise, DistServe."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servesim.validate.common import Check, _pct, load_bundled_profile

# --------------------------------------------------------------------------- operators (Vidur)


def validate_operators(data_dir: Path, limits: dict[str, float] | None = None) -> list[Check]:
    from servesim.calibration.calibrate import operator_fit_data, predict
    from servesim.calibration.measurements import read_operator_profiles

    limits = limits or {"proj": 9.0, "mlp": 8.0, "elementwise": 8.0, "interpolated": 3.0}
    prof = load_bundled_profile("h100_ops")
    tables = read_operator_profiles(data_dir / "measurements" / "vidur_profiling", ("h100",))
    checks = []
    for model in sorted({t.model for t in tables}):
        mine = [t for t in tables if t.model == model]
        for cls in ("proj", "mlp", "elementwise"):
            if not any(cls in t.times_s for t in mine):
                continue
            terms, meas, labels = operator_fit_data(mine, classes=(cls,))
            checks.append(
                Check(
                    "operators",
                    f"{model.split('/')[-1]} H100 TP{'/'.join(str(t.tp) for t in mine)}",
                    f"{cls} time (calibrated roofline)",
                    _pct(predict(terms, prof.eff), meas),
                    limits[cls],
                )
            )
        held = []
        for t in mine:
            for times in t.times_s.values():
                x = t.num_tokens.astype(float)
                held.append(_pct(np.interp(x[1:-1:2], x[0::2], times[0::2]), times[1:-1:2]))
        checks.append(
            Check(
                "operators",
                f"{model.split('/')[-1]} H100",
                "op time (profiled, held-out T)",
                np.concatenate(held),
                limits["interpolated"],
            )
        )
    return checks


# --------------------------------------------------------------------------- Splitwise


def validate_splitwise(data_dir: Path, limits: dict[str, float] | None = None) -> list[Check]:
    from servesim.calibration.calibrate import predict, splitwise_fit_data
    from servesim.calibration.measurements import read_splitwise

    limits = limits or SPLITWISE_LIMITS
    prof = load_bundled_profile("a100_e2e")
    rows = read_splitwise(data_dir / "measurements" / "splitwise" / "perf_model.csv")
    checks = []
    for gpu, role in (("A100-80GB", "fit"), ("H100-SXM", "predicted")):
        for tp in (2, 4, 8):
            sel = [r for r in rows if r.gpu == gpu and r.tp == tp]
            terms, meas, labels = splitwise_fit_data(sel, batched_prompts=True)
            err = _pct(predict(terms, prof.eff), meas)
            for metric in ("prompt", "token"):
                if metric == "prompt":
                    single = np.array([lb.endswith("prompt") and " batch1 " in lb for lb in labels])
                    batched = np.array([lb.endswith("prompt") and " batch1 " not in lb for lb in labels])
                    checks.append(
                        Check(
                            "splitwise",
                            f"Llama-2-70B {gpu} TP{tp} ({role})",
                            "prompt time, 1 prompt",
                            err[single],
                            limits.get(f"{gpu}:prompt"),
                        )
                    )
                    checks.append(
                        Check(
                            "splitwise",
                            f"Llama-2-70B {gpu} TP{tp} ({role})",
                            "prompt time, batch 2-64",
                            err[batched],
                            None,
                            note="not modelled: Splitwise's batched prompts",
                        )
                    )
                else:
                    tok = np.array([lb.endswith("token") for lb in labels])
                    checks.append(
                        Check(
                            "splitwise",
                            f"Llama-2-70B {gpu} TP{tp} ({role})",
                            "per-token time",
                            err[tok],
                            limits.get(f"{gpu}:token"),
                        )
                    )
    return checks


#: Stated bounds (mean absolute error per TP degree, %): the worst TP degree, rounded up.
SPLITWISE_LIMITS = {
    "A100-80GB:prompt": 6.0,
    "A100-80GB:token": 6.0,
    "H100-SXM:prompt": 14.0,
    "H100-SXM:token": 31.0,
}


# --------------------------------------------------------------------------- DistServe


def distserve_grid() -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Prefill batches (prompt lengths) and decode (batch size, context per request) points."""
    prefill = [[p] for p in (128, 256, 512, 1024, 2048)] + [[256] * 4, [512] * 4]
    decode = [(b, c) for b in (1, 8, 32, 64, 128) for c in (256, 1024)]
    return prefill, decode


def validate_distserve(data_dir: Path, limits: dict[tuple[str, str], float] | None = None) -> list[Check]:
    from servesim.calibration.measurements import read_distserve
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.models import load_model
    from servesim.config import ParallelConfig
    from servesim.perf.base import BatchStats

    limits = limits or DISTSERVE_LIMITS
    gpu = get_gpu("A100-80GB")
    prefill_grid, decode_grid = distserve_grid()
    checks = []
    for role, label in (("a100_e2e", "Splitwise e2e profile"), ("a100_ops", "Vidur operator profile")):
        prof = load_bundled_profile(role)
        for engine in ("vllm", "distserve"):
            path = data_dir / "measurements" / "distserve" / f"distserve_profiler-a100-80g.{engine}.json"
            for f in read_distserve(path):
                pm = prof.perf_model(load_model(f.model), gpu, ParallelConfig(tensor_parallel_size=f.tp))
                pre = [
                    (
                        pm.batch_time(
                            BatchStats(
                                num_prefill_tokens=sum(b),
                                num_prefill_reqs=len(b),
                                prefill_attn_work=sum(p * p / 2 for p in b),
                            )
                        ),
                        f.prefill_s(b),
                    )
                    for b in prefill_grid
                ]
                dec = [
                    (
                        pm.batch_time(BatchStats(num_decode_reqs=b, sum_decode_context=b * c)),
                        f.decode_s(b, b * c),
                    )
                    for b, c in decode_grid
                ]
                case = f"{f.model.split('/')[-1].upper()} A100 TP{f.tp}, {engine} engine; {label}"
                for metric, pairs in (("prefill time", pre), ("decode step time", dec)):
                    p, m = np.array(pairs).T
                    checks.append(Check("distserve", case, metric, _pct(p, m), limits.get((role, metric))))
    return checks


#: Stated bounds on the mean error over each DistServe case (the worst case of each kind, rounded up).
DISTSERVE_LIMITS = {
    ("a100_e2e", "prefill time"): 31.0,
    ("a100_e2e", "decode step time"): 191.0,
    ("a100_ops", "prefill time"): 55.0,
    ("a100_ops", "decode step time"): 66.0,
}
