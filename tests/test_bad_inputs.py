"""The battery of malformed, impossible and unusual inputs (tests/bad_inputs/cases.yaml).

Each case runs ``servesim simulate`` (or the case's ``command``, with its extra ``args``)
in-process through the CLI with ``--output`` set. A
case expecting exit 2 must print exactly one line, ``error: ...``, holding the case's
``message`` (and the scenario file's name, when the case has a file), no traceback, and
write nothing. A case expecting exit 0 must run and write its outputs. ``xfail`` names
where the missing check belongs; such a case fails the suite as soon as it passes
(strict), so the mark is removed with the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import shared_data  # tests/ is on sys.path (rootdir-relative, no __init__)
from typer.testing import CliRunner

from servesim.catalog.architectures import REFUSED, SUPPORTED
from servesim.catalog.hf_config import load_model
from servesim.catalog.hybrid import GATED_DELTANET_TYPES
from servesim.cli import app
from servesim.config import EngineConfig
from servesim.errors import CatalogError
from servesim.metrics.records import RequestStatus
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload.base import Workload

HERE = Path(__file__).parent / "bad_inputs"
CASES: list[dict[str, Any]] = yaml.safe_load((HERE / "cases.yaml").read_text())
_KEYS = {
    "id",
    "command",
    "args",
    "argv",
    "file",
    "text",
    "suffix",
    "set",
    "exit",
    "message",
    "names_file",
    "xfail",
}
#: What a command that ran writes into --output (the check of an exit-0 case).
WRITES = {"simulate": "summary.json", "capacity": "capacity.json"}


def _params() -> list[Any]:
    params = []
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=case["xfail"])] if case.get("xfail") else []
        params.append(pytest.param(case, id=case["id"], marks=marks))
    return params


def test_cases_are_well_formed() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    for c in CASES:
        assert set(c) <= _KEYS, f"{c['id']}: unknown keys {set(c) - _KEYS}"
        assert not ("file" in c and "text" in c), f"{c['id']}: give file or text, not both"
        assert not ("argv" in c and ({"file", "text", "set"} & set(c))), f"{c['id']}: argv stands alone"
        assert c["exit"] in (0, 2), c["id"]
        assert c["exit"] == 0 or c.get("message"), f"{c['id']}: an error case names its message"
        if "file" in c:
            assert (HERE / c["file"]).exists() or c["id"] == "file_missing", c["id"]
    used = {c["file"].split("/")[0] for c in CASES if "file" in c}
    scenarios = {p.name for p in HERE.iterdir() if p.suffix in (".yaml", ".toml") and p.is_file()}
    on_disk = scenarios - {"cases.yaml"}
    assert on_disk <= used, f"files no case uses: {sorted(on_disk - used)}"


def _scenario_path(case: dict[str, Any], tmp_path: Path) -> Path | None:
    if "file" in case:
        return HERE / case["file"]
    if "text" in case:
        path = tmp_path / f"{case['id']}{case.get('suffix', '.yaml')}"
        path.write_text(case["text"])
        return path
    return None


def _names_here(word: str) -> bool:
    """Whether an argv word names a path of this folder (one below a file of it included)."""
    return (HERE / word).exists() or (HERE / word.split("/")[0]).is_file() or word.startswith("no_such")


def _other_command(case: dict[str, Any]) -> None:
    """A case of another command (``argv``): its words naming files of this folder point there."""
    argv = [str(HERE / a) if _names_here(a) else a for a in case["argv"]]
    res = CliRunner().invoke(app, argv)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    assert res.exit_code == case["exit"], res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert case["message"] in lines[0]
    named = [a for a in case["argv"][1:] if _names_here(a)]
    if named and case.get("names_file", True):
        assert named[0] in lines[0]


@pytest.mark.parametrize("case", _params())
def test_bad_input(case: dict[str, Any], tmp_path: Path) -> None:
    if "argv" in case:
        return _other_command(case)
    scenario = _scenario_path(case, tmp_path)
    out_dir = tmp_path / "out"
    command = case.get("command", "simulate")
    args = [command, "--quiet", "--no-progress", "--output", str(out_dir), *case.get("args", [])]
    if scenario is not None:
        args.insert(1, str(scenario))
    for override in case.get("set", []):
        args += ["--set", override]
    res = CliRunner().invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    assert res.exit_code == case["exit"], res.output
    if case["exit"] == 0:
        assert (out_dir / WRITES[command]).exists()
        return
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert case["message"] in lines[0]
    if scenario is not None and case.get("names_file", True):
        assert scenario.name in lines[0]
    assert not out_dir.exists(), "nothing is written for a refused input"


# ---------------------------------------------------------------------- every public config.json

HF_CONFIGS = "models/hf_configs"  # under the public data sets (conftest.shared_data)


def _language_model_type(cfg: dict[str, Any]) -> str:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    return str(text.get("model_type") or cfg.get("model_type") or "")


#: Configs of a family servesim models that it still refuses, with the refusal's words:
#: GLM-5.2's layers that share an earlier layer's sparse-attention indexer (``indexer_types``).
_REFUSED_IN_SUPPORTED_FAMILY = {
    "zai-org--GLM-5.2_config.json": "indexer_types has 57 layers",
    "zai-org--GLM-5.2-FP8_config.json": "indexer_types has 57 layers",
    "nvidia--GLM-5.2-NVFP4_config.json": "indexer_types has 57 layers",
}


def _quantized(cfg: dict[str, Any]) -> bool:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    return bool(cfg.get("quantization_config") or text.get("quantization_config"))


@pytest.mark.shared_data
def test_every_public_config_loads_or_is_refused_for_its_architecture() -> None:
    """Each public config.json either loads (its family is one servesim models) or is refused
    in a CatalogError naming the file and its model_type and, for a known architecture, what
    servesim lacks for it; a ModelOpt hf_quant_config.json is named as such."""
    paths = sorted(shared_data(HF_CONFIGS).glob("*.json"))
    assert len(paths) > 50
    loaded = 0
    for path in paths:
        cfg = json.loads(path.read_text())
        kind = _language_model_type(cfg)
        if kind in GATED_DELTANET_TYPES and _quantized(cfg):
            # NVIDIA's NVFP4 Qwen3.5/3.6 exports set each linear layer's precision by name
            with pytest.raises(CatalogError, match="quant") as err:
                load_model(str(path))
            assert str(err.value).startswith(str(path)), err.value
            continue
        if kind in SUPPORTED and path.name not in _REFUSED_IN_SUPPORTED_FAMILY:
            model = load_model(str(path))
            assert model.num_params() > 1e8 and model.kv_bytes_per_token() > 0, path.name
            assert not model.is_moe or 0 < model.num_experts_per_tok <= model.num_experts, path.name
            loaded += 1
            continue
        with pytest.raises(CatalogError) as err:
            load_model(str(path))
        text = str(err.value)
        assert text.startswith(str(path)), text
        if path.name.endswith("hf_quant_config.json"):
            assert "hf_quant_config.json, not a model's config.json" in text
        elif path.name in _REFUSED_IN_SUPPORTED_FAMILY:
            assert _REFUSED_IN_SUPPORTED_FAMILY[path.name] in text, text
        elif kind in REFUSED:
            assert f"model_type {kind!r}" in text and REFUSED[kind] in text, text
        else:
            assert f"model_type {kind!r}" in text and "is not an architecture servesim models" in text, text
    assert loaded >= 30


# ---------------------------------------------------------------------- outcomes counted truly


@pytest.mark.parametrize("reference", [True, False])
def test_output_stopped_at_max_model_len_is_counted_apart(reference: bool) -> None:
    """vLLM stops a request at max_model_len with finish_reason "length": such a request is
    finished, flagged and counted in ``num_finished_length``, not silently as complete."""
    prompts, outputs = np.array([200, 100, 250, 10]), np.array([100, 50, 10, 250])
    wl = Workload(np.arange(4.0), prompts, outputs)
    run = run_engine(wl, EngineConfig(), ConstantPerfModel(0.01, 2e-5), 1000, 256, reference=reference)
    rec = run.records
    assert (rec.status == RequestStatus.FINISHED).all()
    assert rec.finished_length.tolist() == [True, False, True, True]
    assert rec.num_output_tokens.tolist() == [56, 50, 6, 246]  # prompt + output reach 256


def test_summary_and_console_count_length_finishes(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "engine: {max_model_len: 256}\nworkload: {type: synthetic, num_requests: 6, "
        "prompt_len: {value: 200}, output_len: {value: 100}}\n"
    )
    args = ["simulate", str(scenario), "--no-progress", "--output", str(tmp_path / "o")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "6 finished (6 cut short at max_model_len)" in res.output
    counts = json.loads((tmp_path / "o" / "summary.json").read_text())["counts"]
    assert (counts["num_finished"], counts["num_finished_length"]) == (6, 6)


# ---------------------------------------------------------------------- verdicts name their cause

FEW = "prompt_len: {value: 64}, output_len: {value: 8}"
VERDICT_CASES = {
    "every_request_rejected": (
        f"engine: {{max_model_len: 1}}\nworkload: {{type: synthetic, num_requests: 50, {FEW}}}\n",
        "cannot_judge",
        "rejections",
        "cannot judge: 50 of 50 requests were rejected (prompt of 64 tokens",
    ),
    "a_burst_at_once": (
        f"workload: {{type: synthetic, num_requests: 2000, arrival: {{process: burst}}, {FEW}}}\n",
        "cannot_judge",
        "burst",
        "cannot judge: all 2,000 requests arrived at once",
    ),
    "the_only_replica_died": (
        "workload: {type: synthetic, num_requests: 200, arrival: {rate: 2}, prompt_len: {value: 100}, "
        "output_len: {value: 50}}\ncluster:\n  pools: [{name: serve, num_replicas: 1}]\n  operations:\n"
        "    interval_s: 10\n    failures: {events: [{pool: serve, replica: 0, at_s: 20}], "
        "on_failure: fail}\n",
        "not_saturated",
        "failures",
        "service stopped, not overloaded",
    ),
}


@pytest.mark.parametrize("name", sorted(VERDICT_CASES))
def test_saturation_verdict_names_the_real_cause(name: str, tmp_path: Path) -> None:
    """Rejections, a burst and a dead replica are not saturation: the verdict says which."""
    text, verdict, cause, hint = VERDICT_CASES[name]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    res = CliRunner().invoke(
        app, ["simulate", str(scenario), "--no-progress", "--output", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    sat = json.loads((tmp_path / "o" / "summary.json").read_text())["saturation"]
    assert (sat["saturated"], sat["verdict"], sat["cause"]) == (False, verdict, cause)
    assert sat["hint"].startswith(hint), sat["hint"]
    assert "SATURATED" not in res.output and "Saturation" in res.output


def test_an_outlier_request_gives_no_capacity_rather_than_a_broken_load_line(tmp_path: Path) -> None:
    """One request of 1e9 output tokens (cut at max_model_len) among 40 small ones holds 95%
    of the tokens: a mean-length steady state says nothing of this mix, so there is no load
    figure ("load 2453.6% of ~4.2e-09 req/s", or "~2.27 req/s sustainable" at 10 req/s served)."""
    trace = Path(__file__).parent / "fixtures" / "traces" / "outlier_output.csv"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"workload: {{type: trace, path: '{trace}'}}\n")
    res = CliRunner().invoke(
        app, ["simulate", str(scenario), "--no-progress", "--output", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    room = json.loads((tmp_path / "o" / "summary.json").read_text())["headroom"]
    assert room["load_fraction"] is None and room["capacity_requests_per_s"] is None
    assert room["capacity_note"] == (
        "no capacity estimate: one request holds 95% of the tokens served, "
        "so a request of the mean length is not a typical one"
    )
    assert "req/s sustainable" not in res.output


# ---------------------------------------------------------------------- servesim plan says why

PLAN = [
    "plan",
    "--gpus",
    "H100-SXM",
    "--isl",
    "100",
    "--osl",
    "10",
    "--ttft",
    "1",
    "--backend",
    "inprocess",
    "--no-progress",
    "--num-requests",
    "20",
]
NOTHING_SIMULATED = {
    "nothing_fits": (
        ["--model", "Llama-3.1-70B", "--gpus", "L4", "--total-gpus", "1"],
        "memory (1): meta-llama/Llama-3.1-70B on L4",
    ),
    "tp_does_not_divide_heads": (
        ["--model", "Llama-3.1-8B", "--total-gpus", "3", "--set", "plan.tensor_parallel_sizes=[3]"],
        "parallel (1): parallel.tensor_parallel_size: 3 does not divide the 32",
    ),
    "prompt_beyond_max_model_len": (  # was blamed on throughput ("pool busy at least 23 s per second")
        ["--model", "Llama-3.1-8B", "--isl", "200000", "--total-gpus", "1"],
        "memory (1): every prompt has at least 200,000 tokens, not below max_model_len (131,072)",
    ),
    "unreachable_rate": (
        ["--model", "Llama-3.1-8B", "--total-gpus", "2", "--rate", "100000"],
        "throughput (4): colocated pool busy at least",
    ),
}


@pytest.mark.parametrize("name", sorted(NOTHING_SIMULATED))
def test_plan_with_every_candidate_pruned_says_why_not_the_slo(name: str) -> None:
    extra, reason = NOTHING_SIMULATED[name]
    res = CliRunner().invoke(app, [*PLAN, *extra])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and "closest" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: nothing was simulated: every candidate was pruned")
    assert reason in lines[0]
    assert "┏" not in res.stdout  # no empty table


@pytest.mark.parametrize(
    ("slo", "ttft", "tpot"),
    [
        ({}, "p90", "p90"),
        ({"attainment": {"all": 0.99}}, "p99", "p99"),
        (
            {"attainment": {"all": 0.9}, "percentiles": [{"metric": "ttft_s", "p": 99, "max_s": 2.0}]},
            "p99",
            "p90",
        ),
        ({"attainment": {"ttft_s": 0.95, "all": 0.5}}, "p95", "p50"),
    ],
)
def test_plan_table_shows_the_percentile_the_verdict_judges(slo: dict, ttft: str, tpot: str) -> None:
    from servesim.config import SloConfig
    from servesim.planner.output import judged_percentile

    cfg = SloConfig(ttft_s=1.0, tpot_s=0.05, **slo)
    assert (judged_percentile(cfg, "ttft_s"), judged_percentile(cfg, "tpot_s")) == (ttft, tpot)


def test_plan_table_columns_follow_a_p99_target(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: {name: Llama-3.1-8B}\nworkload: {type: synthetic, num_requests: 20, "
        "prompt_len: {value: 100}, output_len: {value: 10}}\n"
        "slo: {ttft_s: 1.0, attainment: {all: 0.99}}\n"
        "plan: {gpus: [H100-SXM], max_total_gpus: 1}\n"
    )
    res = CliRunner().invoke(
        app, ["plan", str(plan), "--backend", "inprocess", "--no-progress"], env={"COLUMNS": "200"}
    )
    assert res.exit_code in (0, 1), res.output
    assert "TTFT p99" in res.stdout and "TPOT p99" in res.stdout and "p90" not in res.stdout


def test_report_table_does_not_answer_no_when_the_verdict_cannot_judge() -> None:
    from servesim.report.tables import run_rows

    sat = {
        "saturated": False,
        "verdict": "cannot_judge",
        "cause": "burst",
        "hint": "cannot judge: all 2,000 requests arrived at once",
    }
    rows = dict(run_rows({"saturation": sat}))
    assert rows["saturated"] == "cannot judge: all 2,000 requests arrived at once"


def test_first_prompts_shorter_than_the_system_prompt_are_raised_with_a_notice() -> None:
    from servesim.config import SessionWorkload
    from servesim.workload.sessions import generate_sessions

    cfg = SessionWorkload(
        num_sessions=40,
        system_prompt_len=512,
        loop="open",
        first_prompt_len={"kind": "lognormal", "mean": 600, "std": 300},
    )
    wl = generate_sessions(cfg)
    raised = [n for n in wl.meta["notices"] if n["code"] == "length_raised"]
    assert len(raised) == 1 and raised[0]["count"] > 0
    assert (
        "first prompts were not longer than workload.system_prompt_len (512) and were raised to 513"
        in (raised[0]["message"])
    )
    assert int(wl.num_prompt_tokens.min()) >= 513


@pytest.mark.parametrize("flag", [["--output", ""], ["-o", ""], ["--output="]])
def test_an_empty_output_path_is_refused_not_read_as_the_current_folder(
    flag: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output "$UNSET"`` reached the commands as "." and wrote into the current folder."""
    from servesim.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["servesim", "simulate", *flag, "--quiet", "--no-progress"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("error: --output: an empty path")
    assert list(tmp_path.iterdir()) == []


def test_a_shared_prefix_longer_than_the_prompts_or_without_groups_gets_a_notice() -> None:
    """Both ran without a word: a prefix beyond the prompt is cut to it, and a prefix_len
    without prefix_groups (or the reverse) shares nothing."""
    from servesim.config import SyntheticWorkload
    from servesim.workload.synthetic import generate_synthetic

    lengths = {"prompt_len": {"kind": "uniform", "low": 50, "high": 150}, "output_len": {"value": 8}}
    wl = generate_synthetic(SyntheticWorkload(num_requests=200, prefix_groups=2, prefix_len=100, **lengths))
    short = int((wl.num_prompt_tokens < 100).sum())
    (beyond,) = [x for x in wl.meta["notices"] if x["code"] == "prefix_beyond_prompt"]
    assert 0 < short < 200 and beyond["count"] == short
    assert beyond["message"].startswith(f"workload.prefix_len: {short:,} of 200 prompts are shorter")
    unused = generate_synthetic(SyntheticWorkload(num_requests=4, prefix_len=100, **lengths)).meta["notices"]
    assert [x["message"] for x in unused if x["code"] == "prefix_unused"] == [
        "workload.prefix_len (100) has no effect with workload.prefix_groups 0: no prompts share a prefix"
    ]
