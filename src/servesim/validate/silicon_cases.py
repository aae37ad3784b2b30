"""The silicon suite's measured runs (``silicon_vllm.csv``) read, and each row as a scenario.

A row is one closed-loop benchmark run (``validate/silicon.py`` says what the suite
measures). :func:`row_case` turns it into a scenario: the model preset of its checkpoint and
precision (an NVFP4 variant's config written by :func:`nvfp4_configs`), the GPU, the
parallelism its launch script served (``bench_harness``), ``hardware.perf_model: kernels``
at the kernel tables nearest its vLLM version, the engine settings of its script or of
AIConfigurator's collection, and a ``type: benchmark`` workload. Rows servesim cannot
represent become skips with the reason.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from servesim.validate.bench_harness import (
    aiconfigurator_settings,
    bench_workload,
    fixed_client_concurrency,
    is_inferencemax,
    measured_at,
    script_for,
    server_parallelism,
    server_settings,
    unknown_client_count,
)
from servesim.validate.silicon_results import SiliconCase

#: Package data: every row of ``silicon_vllm.csv``, the columns below (tools/pack_silicon.py).
BUNDLED_CSV = "silicon_vllm.csv.gz"
COLUMNS = (
    "id",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
    "silicon_data_source",
)

#: The measured system -> (servesim GPU, note): each runs on its own kernel tables (B300 and
#: GB200 on B200's served-MoE and MLA-module tables, ``perf.kernels.sm100_folder``).
GPUS = {
    "h100_sxm": ("H100-SXM", ""),
    "h200_sxm": ("H200", ""),
    "b200_sxm": ("B200", ""),
    "b300_sxm": ("B300", ""),
    "gb200": ("GB200", ""),
}

#: (model_path, precision) -> (servesim preset, NVFP4 variant of it?, note).
#: ``fp4`` rows of MiniMax-M2.5 and Kimi-K2.5 are NVIDIA's NVFP4 checkpoints (their configs:
#: experts in NVFP4, attention and router in bf16, FP8 KV cache); Llama-3.1-70B's is the
#: preset with every linear layer but the LM head in NVFP4 (its checkpoint config is not in
#: the data); gpt-oss's fp4 is its own MXFP4 experts.
MODELS = {
    ("meta-llama/Llama-3.1-70B", "fp8"): ("nvidia/Llama-3.1-70B-Instruct-FP8", False, ""),
    ("meta-llama/Llama-3.1-70B", "fp4"): ("meta-llama/Llama-3.1-70B", True, "NVFP4 linear layers"),
    ("meta-llama/Llama-3.1-70B", ""): ("meta-llama/Llama-3.1-70B", False, ""),
    ("Qwen/Qwen3-32B", ""): ("Qwen/Qwen3-32B", False, ""),
    ("Qwen/Qwen3-32B", "fp8"): ("Qwen/Qwen3-32B-FP8", False, ""),
    ("Qwen/Qwen3-235B-A22B-FP8", "fp8"): ("Qwen/Qwen3-235B-A22B-FP8", False, ""),
    ("openai/gpt-oss-120b", "fp4"): ("openai/gpt-oss-120b", False, "the checkpoint's MXFP4 experts"),
    ("MiniMaxAI/MiniMax-M2.5", "fp8"): ("MiniMaxAI/MiniMax-M2.5", False, ""),
    ("MiniMaxAI/MiniMax-M2.5", "fp4"): ("nvidia/MiniMax-M2.5-NVFP4", False, "NVIDIA's NVFP4 checkpoint"),
    ("moonshotai/Kimi-K2.5", "int4"): ("moonshotai/Kimi-K2.5", False, "the checkpoint's int4 experts"),
    ("moonshotai/Kimi-K2.5", "fp4"): ("nvidia/Kimi-K2.5-NVFP4", False, "NVIDIA's NVFP4 checkpoint"),
}

#: Pass the row's vLLM version into ``engine.version`` (its async-scheduling and CUDA-graph
#: defaults); nightly builds and rows without a version run at the newest modelled version.
PASS_ENGINE_VERSION = True
#: InferenceMAX rows run with the ``vllm serve`` settings of their launch script's version at
#: the row's time (``bench_harness.server_settings``): token budget, CUDA-graph capture size
#: and mode, KV-cache dtype, memory fraction, block size, request cap.
USE_SERVER_SCRIPTS = True


def _int(text: str, default: int = 1) -> int:
    v = int(float(text)) if text.strip() else default
    return v if v > 0 else default


def read_silicon(path: Path | None = None) -> list[dict[str, str]]:
    """The rows of ``silicon_vllm.csv`` (a file with at least ``COLUMNS``; default: bundled)."""
    if path is None:
        raw = resources.files("servesim").joinpath("data", BUNDLED_CSV).read_bytes()
        text = gzip.decompress(raw).decode()
    else:
        text = Path(path).read_text()
    return [{c: r.get(c) or "" for c in COLUMNS} for r in csv.DictReader(io.StringIO(text))]


def kernel_version_for(gpu: str, backend_version: str) -> str | None:
    """The kernel tables nearest the run's vLLM version (None: the newest, for a nightly or
    unknown version, or a GPU without tables)."""
    from servesim.perf.kernel_model import kernel_versions

    have = kernel_versions(gpu)
    try:
        want = tuple(int(x) for x in backend_version.split("."))
    except ValueError:
        return None
    if not have:
        return None

    def dist(v: str) -> float:
        t = tuple(int(x) for x in v.split("."))
        return abs((t[0] * 1000 + t[1]) - (want[0] * 1000 + want[1]))

    return min(have, key=lambda v: (dist(v), v))


def group_label(row: dict[str, str]) -> str:
    model = row["model_path"].split("/")[-1]
    prec = row["precision"] or "bf16"
    return f"{model} {prec} {row['system']}"


def _scripted_layout(
    script: str, when: str | None, tp: int, dp: int, ep: int, conc: int
) -> tuple[int, int, str]:
    """The (attention DP, EP) a run's launch script started vLLM with, and a note where it
    differs from the benchmark matrix's (else '').

    The launch script decides the layout, not the matrix: without --data-parallel-size it
    serves --tensor-parallel-size $TP, with the experts spread over the TP ranks (vLLM's EP
    size is TP x DP) where it passes --enable-expert-parallel for this run."""
    ep_when, can_dp = server_parallelism(script, when)
    run_dp = dp if can_dp else 1
    run_ep = ep if run_dp > 1 else (tp if ep_when == "always" or (ep_when == "ep>1" and ep > 1) else 1)
    if (run_dp, run_ep) == (dp, ep):
        return dp, ep, ""
    was = f"TP {tp}" + (f", attention DP {dp}" if dp > 1 else "") + f", EP {ep}"
    why = []
    if dp > 1 and not can_dp:
        why.append("passes no --data-parallel-size")
    if ep > 1 and run_ep == 1:
        why.append("passes no --enable-expert-parallel")
    if ep == 1 and run_ep > 1:
        why.append("passes --enable-expert-parallel at every EP size")
    if not why:
        why.append("passes --enable-expert-parallel, and vLLM's EP size is its TP size")
    now = f"TP {tp}" + (f" + EP {run_ep}" if run_ep > 1 else "")
    return (
        run_dp,
        run_ep,
        (f"run as {now} ({conc} clients): the script {' and '.join(why)} (the matrix gave {was})"),
    )


def _vllm_layout(tp: int, dp: int, ep: int, moe_tp: int) -> tuple[int, int] | str:
    """(TP per engine, EP) of a row's layout as vLLM runs it, or why vLLM cannot.

    InferenceMAX's launch scripts run "DP attention" as --tensor-parallel-size 1
    --data-parallel-size $TP --enable-expert-parallel: tp_size GPUs in all, one a rank, the
    experts spread over all of them (the rows' moe_ep_size is tp x dp, and batch_size the
    clients per rank: silicon_concurrency / dp)."""
    if dp > 1:
        if tp % dp:
            return f"attention data parallelism {dp} does not divide tp {tp}"
        return tp // dp, (tp if ep > 1 else 1)
    if ep > 1 and moe_tp * ep != tp:
        return f"moe_tp {moe_tp} x moe_ep {ep} != tp {tp}: an expert layout vLLM's TP/EP does not give"
    return tp, ep


def row_case(row: dict[str, str], nvfp4_dir: Path | None = None) -> SiliconCase:
    """The scenario (as a dict for ``Scenario.model_validate``) of one measured run, or the
    reason it is skipped. ``nvfp4_dir`` holds the NVFP4 configs (``nvfp4_configs``)."""
    case = SiliconCase(row, None, group=group_label(row))
    own = not is_inferencemax(row["silicon_data_source"])
    run = _unmodelled(row, own) or _served_layout(row, own, case)
    if isinstance(run, str):
        case.skip = run
        return case
    gpu, gpu_note = GPUS[row["system"]]
    preset, nvfp4, model_note = MODELS[(row["model_path"], row["precision"])]
    if gpu_note:
        case.notes.append(gpu_note)
    if model_note:
        case.notes.append(model_note)
    name = preset
    if nvfp4:
        case.nvfp4 = preset
        name = str((nvfp4_dir or Path(".")) / _nvfp4_dirname(preset))
    engine, model_cfg = _engine_settings(row, run, own, name, case)
    case.scenario = {
        "name": row["id"],
        "model": model_cfg,
        "hardware": {
            "gpu": gpu,
            "perf_model": "kernels",
            "kernel_version": kernel_version_for(gpu, row["backend_version"]),
        },
        "parallel": {
            "tensor_parallel_size": run.tp,
            "pipeline_parallel_size": run.pp,
            "expert_parallel_size": run.ep,
            "data_parallel_size": run.dp,
        },
        "engine": engine,
        "workload": bench_workload(row["silicon_data_source"], run.isl, run.osl, run.conc),
        "slo": {"ttft_s": None, "tpot_s": None},
        "run": {"record_steps": False},
    }
    return case


@dataclass(slots=True)
class _ServedRun:
    """How one row's run was served: its layout as vLLM ran it, its clients and lengths, and
    the launch script (with the time it ran at) whose ``vllm serve`` settings apply, if any."""

    tp: int
    pp: int
    ep: int
    dp: int
    conc: int
    isl: int
    osl: int
    script: str | None  # None: no launch script's settings (AIConfigurator's own runs, or none known)
    when: str | None


def _unmodelled(row: dict[str, str], own: bool) -> str:
    """Why servesim cannot represent the row's run ('' if it can): its mode, an unknown
    client count, or no GPU or model preset for it."""
    if row["mode"] != "agg":
        return (
            f"mode {row['mode']}: disaggregated prefill/decode workers are not an aggregated "
            f"vllm bench run (this suite simulates one engine)"
        )
    if own and (why := unknown_client_count(row["silicon_data_source"])):
        return why
    if row["system"] not in GPUS:
        return f"system {row['system']}: no GPU of the catalog"
    if (row["model_path"], row["precision"]) not in MODELS:
        return f"{row['model_path']} at precision {row['precision'] or 'bf16'}: no preset"
    return ""


def _served_layout(row: dict[str, str], own: bool, case: SiliconCase) -> _ServedRun | str:
    """The row's parallelism as its launch script served it (a note in ``case`` where that
    differs from the benchmark matrix's), or why the run cannot be represented."""
    tp, pp = _int(row["tp_size"]), _int(row["pp_size"])
    moe_tp, ep = _int(row["moe_tp_size"]), _int(row["moe_ep_size"])
    dp = _int(row["attention_dp_size"])
    conc = _int(row["batch_size"]) * dp  # a DP row's batch_size is one rank's share of the clients
    script = script_for(row["model_path"], row["precision"], row["system"])
    scripted = USE_SERVER_SCRIPTS and script is not None and not own
    when = None
    if scripted:
        assert script is not None
        when = measured_at(row["silicon_data_source"]) or _undated_time(script, row["backend_version"])
        if fixed_client_concurrency(script, row["silicon_data_source"]) == conc:
            return (
                f"concurrency {conc} is the client's fixed --max-concurrency of the day's "
                f"{script}.sh, whose server ran --max-num-seqs $CONC and $CONC x 10 prompts "
                "for a $CONC the row does not record"
            )
        run_dp, run_ep, note = _scripted_layout(script, when, tp, dp, ep, conc)
        if note:
            case.notes.append(note)
            ep, dp = run_ep, run_dp
            moe_tp = tp // ep
    layout = _vllm_layout(tp, dp, ep, moe_tp)
    if isinstance(layout, str):
        return layout
    tp, ep = layout
    isl, osl = _int(row["isl"]), _int(row["osl"])
    return _ServedRun(tp, pp, ep, dp, conc, isl, osl, script if scripted else None, when)


def _engine_settings(
    row: dict[str, str], run: _ServedRun, own: bool, name: str, case: SiliconCase
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenario's ``engine`` and ``model`` sections: the row's vLLM version and context
    length, with its launch script's ``vllm serve`` settings or AIConfigurator's (a note in
    ``case`` saying which)."""
    engine: dict[str, Any] = {"max_model_len": run.isl + run.osl}
    if PASS_ENGINE_VERSION and row["backend_version"][:1].isdigit():
        engine["version"] = row["backend_version"]
    model_cfg: dict[str, Any] = {"name": name}
    if run.script is not None:
        eng, mod, note = server_settings(run.script, run.when, run.isl, run.osl, run.conc)
        engine.update(eng)
        model_cfg.update(mod)
        case.notes.append(note)
    elif own:
        eng, note = aiconfigurator_settings(run.isl, run.osl, run.conc)
        engine.update(eng)
        case.notes.append(note)
    return engine, model_cfg


@cache
def _undated_times() -> dict[tuple[str, str], str]:
    """(script, vLLM version) -> the earliest ``measured=`` time of the bundled rows of that
    script and version: the time a row without one (the Kimi gap-analysis sheet) is taken
    to have run at."""
    out: dict[tuple[str, str], str] = {}
    for r in read_silicon():
        script = script_for(r["model_path"], r["precision"], r["system"])
        when = measured_at(r["silicon_data_source"])
        if script is not None and when is not None:
            key = (script, r["backend_version"])
            out[key] = min(out.get(key, when), when)
    return out


def _undated_time(script: str, backend_version: str) -> str | None:
    return _undated_times().get((script, backend_version))


def _nvfp4_dirname(preset: str) -> str:
    return preset.split("/")[-1] + "-NVFP4"


@contextmanager
def nvfp4_configs(presets: set[str]) -> Iterator[Path]:
    """A temporary folder with one ModelOpt NVFP4 checkpoint config per preset: the preset's
    ``config.json`` (its own quantization removed) and an ``hf_quant_config.json`` putting
    every linear layer but the LM head in NVFP4 (KV cache dtype: the model's)."""
    from servesim.catalog.hf_config import _lookup_preset, _presets

    with tempfile.TemporaryDirectory(prefix="servesim-silicon-") as tmp:
        for preset in sorted(presets):
            canon = _lookup_preset(preset)
            assert canon is not None, preset
            cfg = {
                k: v
                for k, v in _presets()[canon].items()
                if not k.startswith("_servesim") and k != "quantization_config"
            }
            cfg["_name_or_path"] = canon + "-NVFP4"
            d = Path(tmp) / _nvfp4_dirname(preset)
            d.mkdir()
            (d / "config.json").write_text(json.dumps(cfg))
            (d / "hf_quant_config.json").write_text(
                json.dumps({"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}})
            )
        yield Path(tmp)
