"""The ``silicon`` validation suite: rows of AIConfigurator's silicon_vllm.csv as scenarios."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from conftest import shared_data

from servesim.config import Scenario
from servesim.validate import silicon as s
from servesim.validate.silicon_results import write_report


def _row(**kw: str) -> dict[str, str]:
    base = dict.fromkeys(s.COLUMNS, "")
    base.update(
        id="r",
        backend_version="0.19.0",
        model_path="meta-llama/Llama-3.1-70B",
        system="h200_sxm",
        precision="fp8",
        mode="agg",
        isl="1024",
        osl="1024",
        gemm_quant_mode="fp8",
        moe_quant_mode="fp8",
        batch_size="16",
        tp_size="2",
        pp_size="1",
        attention_dp_size="1",
        moe_tp_size="2",
        moe_ep_size="1",
        silicon_ttft_ms="100",
        silicon_tpot_ms="20",
    )
    base.update(kw)
    return base


def test_bundled_rows():
    rows = s.read_silicon()
    assert len(rows) == 1093
    assert set(rows[0]) == set(s.COLUMNS)


@pytest.mark.shared_data
def test_bundled_copy_equals_the_shared_csv():
    path = shared_data("measurements/aiconfigurator/silicon_vllm.csv")
    with path.open(newline="") as f:
        full = [{c: r[c] for c in s.COLUMNS} for r in csv.DictReader(f)]
    assert s.read_silicon() == full


def test_row_to_scenario_fields():
    case = s.row_case(_row(silicon_data_source="source_file=2025-10-29.csv; measured=2025-10-29"))
    assert not case.skip
    sc = case.scenario
    # an InferenceMAX row: its launch script's settings (FP8 KV cache, max-num-seqs = clients)
    assert sc["model"] == {"name": "nvidia/Llama-3.1-70B-Instruct-FP8", "kv_cache_dtype": "fp8"}
    assert sc["hardware"] == {"gpu": "H200", "perf_model": "kernels", "kernel_version": "0.19.0"}
    assert sc["parallel"] == {
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "expert_parallel_size": 1,
        "data_parallel_size": 1,
    }
    assert sc["engine"]["max_model_len"] == 2048
    assert (
        sc["engine"]["max_num_seqs"],
        sc["engine"]["max_num_batched_tokens"],
        sc["engine"]["gpu_memory_utilization"],
    ) == (16, 8192, 0.9)
    wl = sc["workload"]  # an InferenceMAX run (no source of AIConfigurator's own collection)
    assert (
        wl["type"],
        wl["client"],
        wl["input_len"],
        wl["output_len"],
        wl["random_range_ratio"],
        wl["max_concurrency"],
        wl["num_warmups"],
        wl["num_prompts"],
    ) == ("benchmark", "benchmark_serving", 1024, 1024, 0.8, 16, 0, 160)
    Scenario.model_validate(sc)  # a valid scenario
    assert case.group == "Llama-3.1-70B fp8 h200_sxm"


def test_row_mapping_variants(tmp_path):
    # expert parallelism; the old vLLM version takes the nearest kernel tables
    c = s.row_case(
        _row(
            model_path="MiniMaxAI/MiniMax-M2.5",
            tp_size="4",
            moe_tp_size="1",
            moe_ep_size="4",
            backend_version="0.12.0",
            system="h100_sxm",
        )
    )
    assert c.scenario["parallel"]["expert_parallel_size"] == 4
    assert c.scenario["hardware"]["kernel_version"] == "0.14.0"
    # a dense model's empty MoE fields; bf16
    c = s.row_case(
        _row(
            model_path="Qwen/Qwen3-32B",
            precision="",
            tp_size="4",
            moe_tp_size="1",
            moe_ep_size="1",
            attention_dp_size="",
            system="h100_sxm",
        )
    )
    assert c.scenario["model"]["name"] == "Qwen/Qwen3-32B"
    assert c.scenario["parallel"]["tensor_parallel_size"] == 4
    # NVFP4: a ModelOpt config written for the preset
    c = s.row_case(_row(precision="fp4", system="b200_sxm"), tmp_path)
    assert c.nvfp4 == "meta-llama/Llama-3.1-70B"
    assert c.scenario["model"]["name"] == str(tmp_path / "Llama-3.1-70B-NVFP4")
    # MiniMax-M2.5 and Kimi-K2.5 at fp4: NVIDIA's NVFP4 checkpoints (bf16 attention, FP8 KV)
    for path, preset in (
        ("MiniMaxAI/MiniMax-M2.5", "nvidia/MiniMax-M2.5-NVFP4"),
        ("moonshotai/Kimi-K2.5", "nvidia/Kimi-K2.5-NVFP4"),
    ):
        c = s.row_case(
            _row(
                model_path=path,
                precision="fp4",
                system="b200_sxm",
                tp_size="4",
                moe_tp_size="4",
                moe_ep_size="1",
            ),
            tmp_path,
        )
        assert c.scenario["model"]["name"] == preset and not c.nvfp4
    # B300 and GB200 run on their own kernel tables
    c = s.row_case(_row(system="b300_sxm", precision="fp4"))
    assert c.scenario["hardware"] == {"gpu": "B300", "perf_model": "kernels", "kernel_version": "0.19.0"}
    assert not any("B200's kernel tables" in n for n in c.notes)
    assert s.row_case(_row(system="gb200")).scenario["hardware"]["gpu"] == "GB200"


def test_each_row_runs_the_client_of_its_harness():
    """InferenceMAX's bench_serving (lengths in [0.8 L, L], 10 requests per client) for every
    source but AIConfigurator's own per-GPU files (fixed lengths)."""
    from servesim.validate.bench_harness import MIN_PROMPTS, PROMPTS_PER_CLIENT, is_inferencemax

    own = "source_file=h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; silicon_concurrency=8"
    c = s.row_case(_row(silicon_data_source=own, batch_size="2"))
    wl = c.scenario["workload"]
    assert "client" not in wl and wl["random_range_ratio"] == 0.0
    assert wl["num_prompts"] == max(PROMPTS_PER_CLIENT * 2, MIN_PROMPTS)
    # ... and the worker AIConfigurator's generator deploys: a budget of batch + ISL + 1500
    # tokens (2 + 1024 + 1500), the batch as --max-num-seqs, ISL + OSL + 1500 as model length
    eng = c.scenario["engine"]
    assert (eng["max_num_batched_tokens"], eng["max_num_seqs"], eng["max_model_len"]) == (2526, 2, 3548)
    assert any("AIConfigurator's generated Dynamo vLLM worker" in n for n in c.notes)
    # an InferenceMAX row keeps vLLM's default budget (its script sets none)
    imax_row = s.row_case(_row(silicon_data_source="source_file=2025-10-29.csv; measured=2025-10-29"))
    assert imax_row.scenario["engine"]["max_num_batched_tokens"] == 8192
    # a row of the collection without its benchmark's concurrency is not identified
    c = s.row_case(
        _row(
            silicon_data_source="source_file=h100_sxm/vllm/0.12.0/qwen3_32b.csv; measured=2026-01-23",
            batch_size="144",
        )
    )
    assert c.scenario is None and "no silicon_concurrency" in c.skip
    rows = s.read_silicon()
    imax = [r for r in rows if is_inferencemax(r["silicon_data_source"])]
    assert len(rows) - len(imax) == 96  # the three files of AIConfigurator's H100 collection
    # every InferenceMAX row is one of its client table's (ISL, OSL) pairs
    assert {(r["isl"], r["osl"]) for r in imax} == {("1024", "1024"), ("1024", "8192"), ("8192", "1024")}
    Scenario.model_validate(s.row_case(imax[0]).scenario)


def test_inferencemax_rows_run_their_launch_scripts_settings():
    from servesim.validate.bench_harness import measured_at, server_settings

    # MiniMax-M2.5 FP8 on B200 in March: 0.95 of memory, 32-token blocks, FlashInfer's and
    # DeepGEMM's MoE switched off: vLLM's FP8 oracle then serves Triton's experts
    eng, mod, note = server_settings("minimaxm2.5_fp8_b200", "2026-03-11T19:00:00Z", 1024, 1024, 64)
    assert eng == {"gpu_memory_utilization": 0.95, "block_size": 32, "moe_backend": "triton"} and mod == {}
    assert "f342df18e" in note and "VLLM_USE_FLASHINFER_MOE_FP8" not in note
    # from 2026-04-03: FP8 KV, graphs up to 2048 tokens, a budget of twice the prompt
    eng, mod, note = server_settings("minimaxm2.5_fp8_b200", "2026-04-03T20:00:00Z", 8192, 1024, 64)
    assert (
        eng["max_num_batched_tokens"],
        eng["max_cudagraph_capture_size"],
        eng["gpu_memory_utilization"],
        eng["enable_prefix_caching"],
    ) == (16384, 2048, 0.9, False)
    assert mod == {"kv_cache_dtype": "fp8"} and eng["stream_interval"] == 20 and "stream-interval" not in note
    assert "moe_backend" not in eng  # the oracle's default on SM100: FlashInfer's TRTLLM-gen MoE
    assert "float32_matmul_precision" not in eng
    # from 2026-04-22: VLLM_FLOAT32_MATMUL_PRECISION=high, the fp32 router on TF32 tensor cores
    eng, _, note = server_settings("minimaxm2.5_fp8_b200", "2026-04-22T12:00:00Z", 1024, 1024, 64)
    assert eng["float32_matmul_precision"] == "high" and "FLOAT32_MATMUL" not in note
    # a run before the script's merge takes the version of its pull request's branch at
    # that time: MiniMax-M2.5 FP4 B200's nightly runs of 2026-04-03, without the token
    # budget and capture size the merged version (79bd988e9, 2026-04-08) added
    eng, mod, note = server_settings("minimaxm2.5_fp4_b200", "2026-04-03T23:59:59Z", 1024, 1024, 4)
    assert "at 08bcde8f1 (2026-04-02, a pull request's branch)" in note
    assert eng == {
        "gpu_memory_utilization": 0.95,
        "block_size": 32,
        "enable_prefix_caching": False,
        "stream_interval": 20,
    }
    assert mod == {"kv_cache_dtype": "fp8"}
    assert "at 79bd988e9" in server_settings("minimaxm2.5_fp4_b200", "2026-04-08T23:59:59Z", 1024, 1024, 4)[2]
    # a run before every version takes the first
    assert (
        "a pull request's branch"
        in server_settings("minimaxm2.5_fp4_b200", "2026-01-01T00:00:00Z", 1024, 1024, 4)[2]
    )
    # counts in the run's clients; Llama-3.1-70B fp4's FULL_DECODE_ONLY and async scheduling
    assert (
        server_settings("kimik2.5_int4_h200", "2026-03-27T23:00:00Z", 1024, 1024, 16)[0]["max_num_seqs"] == 16
    )
    # VLLM_MXFP4_USE_MARLIN=1 (gpt-oss on H100 from January 2026) is engine.moe_backend: marlin
    eng, _, note = server_settings("gptoss_fp4_h100", "2026-03-28T12:00:00Z", 1024, 1024, 16)
    assert eng["moe_backend"] == "marlin" and "VLLM_MXFP4_USE_MARLIN" not in note
    assert "moe_backend" not in server_settings("gptoss_fp4_h100", "2025-12-10T00:00:00Z", 1024, 1024, 16)[0]
    # VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (gpt-oss on B200 from September 2025) is
    # engine.moe_backend: flashinfer_mxfp4_mxfp8
    eng, _, note = server_settings("gptoss_fp4_b200", "2026-02-25T23:59:59Z", 1024, 1024, 16)
    assert eng["moe_backend"] == "flashinfer_mxfp4_mxfp8" and "MXFP4_MXFP8" not in note
    assert "moe_backend" not in server_settings("gptoss_fp4_b200", "2025-09-20T00:00:00Z", 1024, 1024, 16)[0]
    eng, mod, _ = server_settings("70b_fp4_b200", measured_at("measured=2025-10-29"), 1024, 1024, 4)
    assert (
        eng["cudagraph_mode"] == "full_decode_only"
        and eng["async_scheduling"]
        and mod["kv_cache_dtype"] == "fp8"
    )
    assert measured_at("x; measured=2026-03-24T20:03:09Z; wip=False") == "2026-03-24T23:59:59Z"
    assert measured_at("measured=2025-10-29") == "2025-10-29T23:59:59Z" and measured_at("x") is None
    # row_case applies them; AIConfigurator's own rows keep vLLM's defaults
    rows = [
        r
        for r in s.read_silicon()
        if r["model_path"] == "MiniMaxAI/MiniMax-M2.5"
        and r["system"] == "b200_sxm"
        and "measured=2026-04-03T02" in r["silicon_data_source"]
        and r["attention_dp_size"] in ("", "1")
    ]
    c = s.row_case(rows[0])
    assert c.scenario["model"]["kv_cache_dtype"] == "fp8"
    assert c.scenario["engine"]["max_cudagraph_capture_size"] == 2048
    assert any(n.startswith("server: minimaxm2.5_fp8_b200.sh at bddbf4031") for n in c.notes)
    Scenario.model_validate(c.scenario)
    own = s.row_case(
        _row(
            silicon_data_source="source_file=h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; silicon_concurrency=16",
            model_path="Qwen/Qwen3-32B",
            precision="",
            system="h100_sxm",
        )
    )
    assert "gpu_memory_utilization" not in own.scenario["engine"]
    assert not any(n.startswith("server: ") and ".sh at" in n for n in own.notes)


SCRIPT = r"""GMU=0.85
cat > config.yaml << EOF
kv-cache-dtype: fp8
max-num-batched-tokens: 8192
compilation-config: '{"cudagraph_mode":"FULL_DECODE_ONLY"}'
async-scheduling: true
EOF
export VLLM_USE_FLASHINFER_MOE_FP8=0
vllm serve $MODEL --config config.yaml --gpu-memory-utilization $GMU --max-num-seqs $CONC \
--max-cudagraph-capture-size "$((ISL * 2 ))" --block-size=32 --no-enable-prefix-caching --stream-interval 20
"""


def test_launch_script_parser():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "pack_inferencemax_servers.py"
    spec = importlib.util.spec_from_file_location("pack_inferencemax_servers", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    got = tool.parse(SCRIPT)
    assert got["engine"] == {
        "gpu_memory_utilization": 0.85,
        "block_size": 32,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": "CONC",
        "max_cudagraph_capture_size": "2*ISL",
        "cudagraph_mode": "full_decode_only",
        "async_scheduling": True,
        "enable_prefix_caching": False,
    }
    assert got["model"] == {"kv_cache_dtype": "fp8"} and got["env"] == {"VLLM_USE_FLASHINFER_MOE_FP8": "0"}
    assert got["recorded"] == {"stream-interval": "20"} and got["conflicts"] == []
    # the client's --max-concurrency where a version fixes it, not where it is the run's $CONC
    assert got["client"] == {} and tool.parse(SCRIPT + 'bench --max-concurrency "$CONC"\n')["client"] == {}
    assert tool.parse(SCRIPT + "bench --max-concurrency 512\n")["client"] == {"max_concurrency": 512}
    # a setting given two ways in one script is a conflict the tool reports
    assert tool.parse("vllm serve m --block-size 16\nvllm serve m --block-size 32")["conflicts"]

    # when the script passes --enable-expert-parallel: behind an EP-size test above 1, or
    # for every run (no test, or the -ge 1 test every EP size passes)
    def ep(guard: str) -> object:
        text = f'if [ "$EP_SIZE" {guard} ]; then EP=" --enable-expert-parallel"; fi\nvllm serve m $EP'
        return tool.parse(text)["recorded"].get("enable-expert-parallel")

    assert (ep("-gt 1"), ep("-ge 1"), ep("-ge 2")) == ("ep>1", "always", "ep>1")
    # a variable's default, also where the script assigns the variable its own default
    for text in (
        "vllm serve m --block-size ${BLOCK_SIZE:-32}",
        "BLOCK_SIZE=${BLOCK_SIZE:-32}\nvllm serve m --block-size $BLOCK_SIZE",
    ):
        assert tool.parse(text)["engine"]["block_size"] == 32
    always = tool.parse("vllm serve m --enable-expert-parallel")["recorded"]
    assert always["enable-expert-parallel"] == "always"
    assert "enable-expert-parallel" not in tool.parse("vllm serve m --tensor-parallel-size=$TP")["recorded"]


def test_a_row_at_the_clients_fixed_concurrency_is_not_identified():
    """gpt-oss-120b's H100 script of 21 November to 8 December 2025 ran its client at a fixed
    --max-concurrency 512 and its server at --max-num-seqs $CONC (4-64 in the benchmark
    matrix, which has no 512) with $CONC x 10 prompts. Its rows record 512: their measured
    TTFT (20-460 s) is the wait for ten waves of $CONC requests and their TPOT (3.6-27 ms)
    that of $CONC running, a $CONC they do not record; they are skipped."""
    from servesim.validate.bench_harness import fixed_client_concurrency

    assert fixed_client_concurrency("gptoss_fp4_h100", "measured=2025-12-05T00:00:00.000Z") == 512
    # the day the fix landed: the version of its first second still fixed 512
    assert fixed_client_concurrency("gptoss_fp4_h100", "measured=2025-12-08T00:00:00.000Z") == 512
    assert fixed_client_concurrency("gptoss_fp4_h100", "measured=2025-12-09T00:00:00.000Z") is None
    assert fixed_client_concurrency("gptoss_fp4_b200", "measured=2025-12-05T00:00:00.000Z") is None
    rows = [
        r for r in s.read_silicon() if r["model_path"] == "openai/gpt-oss-120b" and r["system"] == "h100_sxm"
    ]
    skipped = [r for r in rows if "fixed --max-concurrency" in (s.row_case(r).skip or "")]
    assert len(skipped) == 9 and {r["batch_size"] for r in skipped} == {"512"}
    for r in skipped:  # TTFT longer than the request's decode: it waited in the server's queue
        assert float(r["silicon_ttft_ms"]) > int(r["osl"]) * float(r["silicon_tpot_ms"])
    assert all(not s.row_case(r).skip for r in rows if r["batch_size"] != "512")


def test_nvfp4_config_is_read_as_nvfp4():
    from servesim.catalog.hf_config import load_model

    with s.nvfp4_configs({"meta-llama/Llama-3.1-70B"}) as tmp:
        m = load_model(str(tmp / "Llama-3.1-70B-NVFP4"))
    assert m.dtype == "nvfp4"


@pytest.mark.parametrize(
    "kw, reason",
    [
        ({"mode": "disagg"}, "mode disagg"),
        (
            {
                "attention_dp_size": "4",
                "moe_ep_size": "8",
                "moe_tp_size": "1",
                "tp_size": "2",
                "silicon_data_source": "source_file=h200_sxm/vllm/0.19.0/runs.csv; silicon_concurrency=16",
            },  # no launch script
            "attention data parallelism 4 does not divide tp 2",
        ),
        ({"system": "mi300x"}, "system mi300x"),
        ({"precision": "int8"}, "no preset"),
    ],
)
def test_skipped_rows_carry_reasons(kw, reason):
    c = s.row_case(_row(**kw))
    assert c.scenario is None and reason in c.skip


def test_a_data_parallel_row_runs_as_its_launch_script_starts_vllm():
    # InferenceMAX's DP attention (the MiniMax-M2.5 FP4 B200 script): --tensor-parallel-size 1
    # --data-parallel-size $TP --enable-expert-parallel on TP GPUs; the row's batch_size is
    # one rank's clients.
    c = s.row_case(
        _row(
            model_path="MiniMaxAI/MiniMax-M2.5",
            precision="fp4",
            system="b200_sxm",
            tp_size="4",
            attention_dp_size="4",
            moe_tp_size="1",
            moe_ep_size="16",
            batch_size="8",
            silicon_data_source="db-dump; measured=2026-04-20T00:00:00.000Z",
        )
    )
    assert not c.skip
    assert c.scenario["parallel"] == {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "expert_parallel_size": 4,
        "data_parallel_size": 4,
    }
    assert c.scenario["workload"]["max_concurrency"] == 32


def test_the_launch_script_not_the_matrix_decides_the_parallel_layout():
    # The MiniMax-M2.5 FP8 H100 script serves --tensor-parallel-size=$TP, with
    # --enable-expert-parallel when EP_SIZE > 1, and has no --data-parallel-size: a row the
    # benchmark matrix marks DP attention (attention_dp 4, moe_ep 16) ran as TP 4 + EP 4,
    # every client on the one engine.
    src = "db-dump; measured=2026-04-20T00:00:00.000Z"
    c = s.row_case(
        _row(
            model_path="MiniMaxAI/MiniMax-M2.5",
            precision="fp8",
            system="h100_sxm",
            tp_size="4",
            attention_dp_size="4",
            moe_tp_size="1",
            moe_ep_size="16",
            batch_size="8",
            silicon_data_source=src,
        )
    )
    assert c.scenario["parallel"] == {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 1,
        "expert_parallel_size": 4,
        "data_parallel_size": 1,
    }
    assert c.scenario["workload"]["max_concurrency"] == 32
    assert any(
        "run as TP 4 + EP 4 (32 clients): the script passes no --data-parallel-size" in n for n in c.notes
    )
    # The Kimi-K2.5 FP4 B200 script of March 2026 passes neither flag: its "EP 4" rows ran
    # as plain TP 4 (the experts split 4 ways, not spread); its August version passes both.
    kimi = dict(
        model_path="moonshotai/Kimi-K2.5",
        precision="fp4",
        system="b200_sxm",
        tp_size="4",
        attention_dp_size="1",
        moe_tp_size="1",
        moe_ep_size="4",
        batch_size="8",
    )
    march = s.row_case(_row(**kimi, silicon_data_source="db-dump; measured=2026-03-27T00:00:00.000Z"))
    assert march.scenario["parallel"]["expert_parallel_size"] == 1
    assert any("--enable-expert-parallel" in n and "data-parallel" not in n for n in march.notes)
    august = s.row_case(_row(**kimi, silicon_data_source="db-dump; measured=2026-08-10T00:00:00.000Z"))
    assert august.scenario["parallel"]["expert_parallel_size"] == 4
    assert not any(n.startswith("run as") for n in august.notes)
    # The MiniMax-M2.5 FP8 H200 script of March-May 2026 tests [ "$EP_SIZE" -ge 1 ]: its
    # "EP 1" rows ran with experts spread over the 8 GPUs; from its May 26 version, -gt 1.
    h200 = dict(
        model_path="MiniMaxAI/MiniMax-M2.5",
        precision="fp8",
        system="h200_sxm",
        tp_size="8",
        moe_tp_size="8",
        moe_ep_size="1",
    )
    ge = s.row_case(_row(**h200, silicon_data_source="db-dump; measured=2026-03-28T00:00:00.000Z"))
    assert ge.scenario["parallel"]["expert_parallel_size"] == 8
    assert any("at every EP size" in n for n in ge.notes)
    gt = s.row_case(_row(**h200, silicon_data_source="db-dump; measured=2026-05-28T00:00:00.000Z"))
    assert gt.scenario["parallel"]["expert_parallel_size"] == 1


def test_every_bundled_row_is_run_or_skipped_with_a_reason():
    cases = [s.row_case(r) for r in s.read_silicon()]
    assert all((c.scenario is None) == bool(c.skip) for c in cases)
    assert sum(c.row["mode"] == "disagg" for c in cases if c.skip) == 17
    assert sum("no silicon_concurrency" in c.skip for c in cases if c.skip) == 3


def test_group_statistics_on_a_hand_made_table():
    def case(group: str, pt: float, pp: float) -> s.SiliconCase:
        c = s.SiliconCase(_row(silicon_ttft_ms="100", silicon_tpot_ms="10"), {}, group=group)
        c.predicted_ttft_ms, c.predicted_tpot_ms = pt, pp
        return c

    cases = [case("a", 110, 10), case("a", 80, 12), case("a", 100, 9), case("b", 150, 10)]
    skipped = s.SiliconCase(_row(), None, skip="why", group="a")
    table = {g["group"]: g for g in s.group_table([*cases, skipped])}
    a = table["a"]
    assert a["n"] == 3
    assert a["ttft_median_abs"] == pytest.approx(10.0)  # |err| 10, 20, 0
    assert a["ttft_p90_abs"] == pytest.approx(np.percentile([10, 20, 0], 90))
    assert a["tpot_median_abs"] == pytest.approx(10.0)  # 0, 20, 10
    assert a["tpot_median"] == pytest.approx(0.0)  # 0, +20, -10
    assert table["all runs"]["n"] == 4
    assert table["all runs"]["ttft_median_abs"] == pytest.approx(15.0)  # 10, 20, 0, 50
    checks = s.checks_of(cases, known_bad={("b", "TTFT"): "hand-made", ("a", "TTFT"): "no longer true"})
    by = {(c.case, c.metric): c for c in checks}
    assert "stale" in by["a", "mean TTFT"].note and "stale" not in by["b", "mean TTFT"].note
    assert by["all runs", "mean TTFT"].limit_pct == s.TTFT_GOAL.limit_pct
    assert by["a", "mean TPOT"].limit_pct == s.GROUP_GOAL.limit_pct
    assert by["a", "mean TTFT"].mape_pct == pytest.approx(10.0)  # the median, as the goal says
    assert by["b", "mean TTFT"].status() == "known bad"
    assert by["all runs", "mean TTFT"].status() == "NO"  # 15% > 12%


def test_a_few_rows_end_to_end(tmp_path):
    rows = s.read_silicon()
    pick = [r for r in rows if r["mode"] == "agg" and r["attention_dp_size"] in ("1", "")]
    pick = [pick[0], *(r for r in pick if r["precision"] == "fp4")][:3] + [
        r for r in pick if r["model_path"] == "Qwen/Qwen3-32B"
    ][:2]
    cases = s.run_cases(pick)
    run = [c for c in cases if not c.skip]
    assert len(run) >= 4
    for c in run:
        assert math.isfinite(c.ttft_err_pct) and math.isfinite(c.tpot_err_pct)
        assert c.predicted_ttft_ms > 0 and c.predicted_tpot_ms > 0
    files = write_report(cases, tmp_path)
    assert [f.name for f in files] == ["silicon_runs.csv", "silicon_groups.json", "silicon_groups.md"]
    with files[0].open() as f:
        assert len(list(csv.DictReader(f))) == len(cases)
    assert json.loads(files[1].read_text())["run"] == len(run)


def test_the_suite_reads_a_data_folder_and_writes_its_report(tmp_path):
    # validate_silicon, the command's entry, on a data folder of two bundled rows: the same
    # cases as run_cases on those rows, and its three report files.
    from servesim.validate.silicon_cross import validate_silicon

    rows = [r for r in s.read_silicon() if r["mode"] == "agg" and r["model_path"] == "Qwen/Qwen3-32B"][:2]
    folder = tmp_path / "data" / "measurements" / "aiconfigurator"
    folder.mkdir(parents=True)
    with (folder / "silicon_vllm.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    skipped: list[str] = []
    checks = validate_silicon(tmp_path / "data", tmp_path / "out", skipped)

    def rows_of(cs: list) -> list:
        return [(c.case, c.metric, c.errors_pct.tolist(), c.limit_pct) for c in cs]

    assert checks and rows_of(checks) == rows_of(s.checks_of(s.run_cases(rows)))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "silicon_groups.json",
        "silicon_groups.md",
        "silicon_runs.csv",
    ]
    with (tmp_path / "out" / "silicon_runs.csv").open() as f:
        assert [r["id"] for r in csv.DictReader(f)] == [r["id"] for r in rows]


def test_known_bad_marks_name_groups_of_the_data():
    groups = {s.group_label(r) for r in s.read_silicon()} | {"all runs"}
    assert {g for g, _ in s.SILICON_KNOWN_BAD} <= groups
    assert {m for _, m in s.SILICON_KNOWN_BAD} <= {"TTFT", "TPOT"}
