"""Readers of hardware measurements: what calibration fits and validation compares against.

Four forms, each read into plain records with SI units (seconds, bytes):

- **Operator profiles** (Vidur's ``compute/<gpu>/<org>/<model>/mlp.csv``): per-layer CUDA
  times of the QKV/output projections, the MLP GEMMs and the small elementwise kernels over
  a grid of token counts and tensor-parallel degrees -> ``OperatorTable``.
- **Collectives** (Vidur's ``network/<topology>/all_reduce.csv``): all-reduce time by
  message bytes and ranks -> ``AllReduceTable``.
- **End-to-end timings** (Splitwise's ``perf_model.csv``): prompt time and per-token time
  of a batch of equal prompts -> ``E2ETiming``; DistServe's fitted formulas
  (``distserve_profiler-*.json``) -> ``DistServeFit``.
- **Engine step logs** (``servesim.calibration.engine_logs``): record.py's JSON or a generic
  per-step CSV -> ``EngineLog`` of (BatchStats, seconds) per step.

The operator and all-reduce tables are also what a profiled perf model times steps
with, so their types live with the perf models (``servesim.perf.operator_tables``).
Every reader raises ``MeasurementError`` naming the file and what was wrong.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.catalog.hf_config import from_hf_config
from servesim.catalog.models import ModelSpec
from servesim.errors import ServesimError
from servesim.perf.base import BatchStats
from servesim.perf.operator_tables import AllReduceTable, AttentionTable, OperatorTable

#: Directory names of Vidur's profiles -> servesim catalog GPU names (A40 is not in the catalog).
VIDUR_GPUS = {"h100": "H100-SXM", "a100": "A100-80GB"}
#: Splitwise hardware names -> catalog names (the power-capped H100 is left out).
SPLITWISE_GPUS = {"a100-80gb": "A100-80GB", "h100-80gb": "H100-SXM"}
#: Splitwise model names -> servesim presets (BLOOM-176B has no preset: ALiBi, no gating).
SPLITWISE_MODELS = {"llama2-70b": "Llama-2-70B"}

#: Operator classes of a profile and the Vidur columns summed into each (per layer).
#: "elementwise" = the two RMSNorms, rotary embedding, activation and residual add.
OPERATOR_COLUMNS = {
    "proj": ("attn_pre_proj", "attn_post_proj"),
    "mlp": ("mlp_up_proj", "mlp_down_proj"),
    "elementwise": ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"),
}


class MeasurementError(ServesimError):
    """A measurement file is missing or malformed."""


# --------------------------------------------------------------------------- operator profiles


def read_attention_profile(path: str | Path, tp: int) -> AttentionTable | None:
    """Rows of ``attention.csv`` for this TP degree (None when there are none)."""
    path = Path(path)
    try:
        rows = [
            r for r in csv.DictReader(path.open(newline="")) if int(r["num_tensor_parallel_workers"]) == tp
        ]
        if not rows:
            return None
        col = {
            k: np.asarray([float(r[k]) for r in rows])
            for k in ("num_tokens", "context_len", "batch_size", "time_stats.attention.median")
        }
    except (OSError, KeyError, ValueError) as err:
        raise MeasurementError(f"{path}: cannot read attention profile: {err}") from None
    return AttentionTable(
        np.asarray([r["kind"] == "prefill" for r in rows]),
        col["num_tokens"].astype(np.int64),
        col["context_len"].astype(np.int64),
        col["batch_size"].astype(np.int64),
        col["time_stats.attention.median"] * 1e-3,
    )


def _shape_from_vidur(row: dict[str, str], name: str) -> ModelSpec:
    heads, hidden = int(row["n_head"]), int(row["n_embd"])
    cfg = {
        "num_hidden_layers": 1,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": int(row["n_kv_head"]),
        "intermediate_size": int(row["n_expanded_embd"]),
        "vocab_size": int(row["vocab_size"]),
        "torch_dtype": "float16",
    }
    if row["use_gated_mlp"].strip().lower() != "true":
        cfg["model_type"] = "opt"  # an ungated (up, down) MLP
    return from_hf_config(cfg, name, source=name)


def read_operator_profile(path: str | Path, gpu: str, model: str) -> list[OperatorTable]:
    """One Vidur ``mlp.csv``: a table per TP degree, medians of repeated rows."""
    path = Path(path)
    try:
        rows = list(csv.DictReader(path.open(newline="")))
    except OSError as err:
        raise MeasurementError(f"{path}: cannot read: {err.strerror or err}") from None
    if not rows:
        raise MeasurementError(f"{path}: no rows")
    need = {f"time_stats.{c}.median" for cls in ("proj", "mlp") for c in OPERATOR_COLUMNS[cls]}
    need |= {"num_tokens", "num_tensor_parallel_workers", "n_head", "n_embd"}
    missing = need - set(rows[0])
    if missing:
        raise MeasurementError(f"{path}: missing columns {sorted(missing)} (expected Vidur's mlp.csv)")
    # A class is read only when all its kernels were timed (Phi-2's parallel block has one norm).
    classes = {
        cls: cols
        for cls, cols in OPERATOR_COLUMNS.items()
        if all(f"time_stats.{c}.median" in rows[0] for c in cols)
    }
    shape = _shape_from_vidur(rows[0], model)
    by_tp: dict[int, dict[int, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for line, row in enumerate(rows, start=2):
        try:
            tp, t = int(row["num_tensor_parallel_workers"]), int(row["num_tokens"])
            by_tp[tp][t].append(
                {
                    cls: sum(float(row[f"time_stats.{c}.median"]) for c in cols) * 1e-3
                    for cls, cols in classes.items()
                }
            )
        except (ValueError, TypeError) as err:
            raise MeasurementError(f"{path}:{line}: {err}") from None
    tables = []
    for tp, by_tokens in sorted(by_tp.items()):
        tokens = np.asarray(sorted(by_tokens), dtype=np.int64)
        times = {
            cls: np.asarray([np.median([r[cls] for r in by_tokens[int(t)]]) for t in tokens])
            for cls in classes
        }
        attn_path = path.with_name("attention.csv")
        attn = read_attention_profile(attn_path, tp) if attn_path.is_file() else None
        tables.append(OperatorTable(gpu, model, tp, shape, tokens, times, str(path), attn))
    return tables


def read_operator_profiles(root: str | Path, gpus: tuple[str, ...] | None = None) -> list[OperatorTable]:
    """Every ``compute/<gpu>/<org>/<model>/mlp.csv`` under ``root`` (a Vidur profiling tree).

    ``gpus`` limits the GPU directories read (e.g. ``("h100",)``). Vidur's directory names
    map to catalog GPUs (``VIDUR_GPUS``; A40 is skipped, the catalog lacks it); any other
    directory (``servesim profile --device-name``) keeps its name.
    """
    root = Path(root)
    compute = root / "compute" if (root / "compute").is_dir() else root
    if not compute.is_dir():
        raise MeasurementError(f"{root}: no such directory (expected a Vidur profiling tree with compute/)")
    tables = []
    for gpu_dir in sorted(p for p in compute.iterdir() if p.is_dir()):
        if (gpus and gpu_dir.name not in gpus) or (not gpus and gpu_dir.name == "a40"):
            continue
        for csv_path in sorted(gpu_dir.glob("**/mlp.csv")):
            name = csv_path.parent.relative_to(gpu_dir).as_posix()
            tables += read_operator_profile(csv_path, VIDUR_GPUS.get(gpu_dir.name, gpu_dir.name), name)
    return tables


def read_allreduce(path: str | Path) -> AllReduceTable:
    """Vidur's ``network/<topology>/all_reduce.csv`` (``size`` is bytes, times in ms)."""
    path = Path(path)
    try:
        rows = list(csv.DictReader(path.open(newline="")))
    except OSError as err:
        raise MeasurementError(f"{path}: cannot read: {err.strerror or err}") from None
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for line, row in enumerate(rows, start=2):
        try:
            groups[int(row["num_workers"]), int(row["size"])].append(
                float(row["time_stats.all_reduce.median"]) * 1e-3
            )
        except (KeyError, ValueError) as err:
            raise MeasurementError(f"{path}:{line}: {err} (expected Vidur's all_reduce.csv)") from None
    keys = sorted(groups)
    return AllReduceTable(
        path.parent.name,
        np.asarray([k[0] for k in keys]),
        np.asarray([k[1] for k in keys]),
        np.asarray([float(np.median(groups[k])) for k in keys]),
    )


# --------------------------------------------------------------------------- end-to-end timings


@dataclass(frozen=True, slots=True)
class E2ETiming:
    """A batch of ``batch_size`` equal prompts, then ``num_output_tokens`` decode steps (Splitwise).

    ``prompt_time_s`` is the prefill iteration; ``token_time_s`` the mean decode iteration
    (context growing from ``prompt_len`` to ``prompt_len + num_output_tokens``).
    """

    model: str  # servesim preset
    gpu: str  # catalog name
    tp: int
    prompt_len: int
    batch_size: int
    num_output_tokens: int
    prompt_time_s: float
    token_time_s: float

    def prefill_stats(self) -> BatchStats:
        b, p = self.batch_size, self.prompt_len
        return BatchStats(num_prefill_tokens=b * p, prefill_attn_work=b * p * p / 2, num_prefill_reqs=b)

    def decode_stats(self) -> BatchStats:
        b = self.batch_size
        return BatchStats(
            num_decode_reqs=b, sum_decode_context=round(b * (self.prompt_len + self.num_output_tokens / 2))
        )


def read_splitwise(path: str | Path) -> list[E2ETiming]:
    """Splitwise's ``perf_model.csv``: means of the repeats of each condition, in seconds.

    Rows of models without a preset (BLOOM-176B) and of the power-capped H100 are skipped.
    """
    path = Path(path)
    try:
        rows = list(csv.DictReader(path.open(newline="")))
    except OSError as err:
        raise MeasurementError(f"{path}: cannot read: {err.strerror or err}") from None
    groups: dict[tuple[str, str, int, int, int, int], list[tuple[float, float]]] = defaultdict(list)
    for line, row in enumerate(rows, start=2):
        try:
            model, gpu = SPLITWISE_MODELS.get(row["model"]), SPLITWISE_GPUS.get(row["hardware"])
            if model is None or gpu is None:
                continue
            key = (
                model,
                gpu,
                int(row["tensor_parallel"]),
                int(row["prompt_size"]),
                int(row["batch_size"]),
                int(row["token_size"]),
            )
            groups[key].append((float(row["prompt_time"]) * 1e-3, float(row["token_time"]) * 1e-3))
        except (KeyError, ValueError) as err:
            raise MeasurementError(f"{path}:{line}: {err} (expected Splitwise's perf_model.csv)") from None
    return [
        E2ETiming(*k, float(np.mean([v[0] for v in vals])), float(np.mean([v[1] for v in vals])))
        for k, vals in sorted(groups.items())
    ]


@dataclass(frozen=True, slots=True)
class DistServeFit:
    """DistServe's profiler fit of one model at one TP degree, in milliseconds.

    prefill_ms = a + b * sum(prompt) + c * sum(prompt^2) for one batch of prompts;
    decode_ms = a + b * sum(context) + c * batch_size, with separate (a, b, c) below and
    above ``threshold`` requests. (As DistServe's simulator evaluates them.)
    """

    model: str
    tp: int
    prefill: tuple[float, float, float]
    decode_small: tuple[float, float, float]
    decode_large: tuple[float, float, float]
    threshold: int

    def prefill_s(self, prompt_lens: list[int]) -> float:
        a, b, c = self.prefill
        return (a + b * sum(prompt_lens) + c * sum(p * p for p in prompt_lens)) * 1e-3

    def decode_s(self, batch_size: int, sum_context: int) -> float:
        a, b, c = self.decode_small if batch_size < self.threshold else self.decode_large
        return (a + b * sum_context + c * batch_size) * 1e-3


def read_distserve(path: str | Path) -> list[DistServeFit]:
    """``distserve_profiler-<gpu>.<engine>.json``: {model: {tp: {prefill, decoding_*}}}."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise MeasurementError(f"{path}: cannot read JSON: {err}") from None
    out = []
    try:
        for model, by_tp in data.items():
            for tp, p in by_tp.items():
                out.append(
                    DistServeFit(
                        model,
                        int(tp),
                        tuple(p["prefill"]),
                        tuple(p["decoding_smallbs"]),
                        tuple(p["decoding_largebs"]),
                        int(p["decoding_large_small_bs_threshold"]),
                    )
                )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise MeasurementError(
            f"{path}: unexpected layout ({err}); expected "
            "{model: {tp: {prefill: [a,b,c], decoding_smallbs: ..., ...}}}"
        ) from None
    return out
