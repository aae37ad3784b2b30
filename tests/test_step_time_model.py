"""Which step-time model answered, as the report header names it (``perf.describe``)."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
from rich.console import Console

import servesim
from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.metrics.console import print_summary
from servesim.perf.describe import describe_perf_model
from servesim.perf.operator_tables import OperatorTable
from servesim.perf.pipelined import PipelinedPerfModel
from servesim.perf.profiled import HardwareProfile, ProfiledPerfModel
from servesim.perf.roofline import RooflinePerfModel

SMALL = {
    "type": "synthetic",
    "num_requests": 30,
    "arrival": {"rate": 5},
    "prompt_len": {"kind": "constant", "value": 200},
    "output_len": {"kind": "constant", "value": 20},
}


def test_the_roofline_says_it_is_uncalibrated() -> None:
    r = servesim.simulate(
        {"model": {"name": "Llama-3.1-8B"}, "workload": SMALL, "hardware": {"perf_model": "roofline"}}
    )
    (m,) = r.summary["step_time_model"]
    assert m["kind"] == "roofline" and not m["calibrated"] and m["warnings"] == []
    out = io.StringIO()
    print_summary(r, Console(file=out, width=200))
    assert "step time: roofline (uncalibrated" in out.getvalue()


def test_a_profile_used_on_another_gpu_is_warned_of() -> None:
    own = servesim.simulate(
        {
            "model": {"name": "Llama-3.1-8B"},
            "workload": SMALL,
            "hardware": {"gpu": "A100-80GB", "profile": "a100_splitwise"},
        }
    )
    (m,) = own.summary["step_time_model"]
    assert m["calibrated"] and m["profile"]["fitted_on"] == "A100-80GB" and m["warnings"] == []
    assert "calibrated by profile" in m["label"]
    other = servesim.simulate(
        {
            "model": {"name": "Llama-3.1-8B"},
            "workload": SMALL,
            "hardware": {"gpu": "H100-SXM", "profile": "a100_splitwise"},
            "cluster": {"pools": [{"name": "a"}]},
        }
    )
    (m,) = other.summary["step_time_model"]
    assert m["pool"] == "a" and len(m["warnings"]) == 1 and "fitted on A100-80GB" in m["warnings"][0]
    out = io.StringIO()
    print_summary(other, Console(file=out, width=300))
    assert "warning: profile" in out.getvalue()


def test_profiled_and_pipelined_models_are_named() -> None:
    m, g = load_model("Llama-3.1-8B"), get_gpu("H100")
    roof = RooflinePerfModel(m, g)
    table = OperatorTable(
        "A100-80GB",
        "Llama-3.1-8B",
        1,
        dataclasses.replace(m, num_layers=1),
        np.asarray([1, 16]),
        {"proj": np.asarray([1e-5, 2e-5])},
        source="ops.csv",
    )
    d = describe_perf_model(ProfiledPerfModel(roof, table), g.name)
    assert d["kind"] == "profile" and d["source"] == "ops.csv"
    assert d["warnings"] == ["operator tables measured on A100-80GB time H100-SXM"]
    pp = RooflinePerfModel(m, g, pp=2)
    d = describe_perf_model(PipelinedPerfModel(pp, 4), g.name)
    assert d["kind"] == "roofline" and d["notes"] == ["split into 4 pipeline micro-batches"]


def test_a_model_that_describes_itself_is_taken_at_its_word() -> None:
    class KernelDb:  # not a subclass: the compiled build's perf models take no interpreted subclasses
        def batch_time(self, stats) -> float:
            return 0.01

        def describe(self) -> dict:
            return {"kind": "kernel_db", "label": "kernel database (H100-SXM, vLLM 0.32)", "source": "db"}

    d = describe_perf_model(KernelDb(), "H100-SXM")
    assert d["kind"] == "kernel_db" and d["calibrated"] and d["gpu"] == "H100-SXM" and d["warnings"] == []
    prof = HardwareProfile.load("a100_splitwise")
    d = describe_perf_model(KernelDb(), "H100-SXM", prof)
    assert d["label"].startswith("kernel database") and "fitted on A100-80GB" in d["warnings"][0]


def test_the_kernel_database_names_its_gpu_and_engine_version() -> None:
    r = servesim.simulate(
        {
            "model": {"name": "Llama-3.1-8B"},
            "workload": SMALL,
            "hardware": {"perf_model": "kernels"},
            "cluster": {"pools": [{"name": "a"}]},
        }
    )
    (m,) = r.summary["step_time_model"]
    assert m["kind"] == "kernel_db" and m["gpu"] == "H100-SXM" and m["engine_version"] not in (None, "none")
    assert m["label"].startswith(f"kernel database (H100-SXM, vLLM {m['engine_version']})")
    bare = servesim.simulate(
        {
            "model": {"name": "Llama-3.1-8B"},
            "workload": SMALL,
            "engine": {"max_model_len": 8192},
            "hardware": {"perf_model": "kernels", "gpu": "L4"},
        }
    ).summary["step_time_model"][0]
    assert bare["warnings"] == ["no kernel tables for L4: every operator is the roofline's"]
