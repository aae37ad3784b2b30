"""What a demanding user tries: LoRA adapters in a fleet of LoRA and plain pools, vLLM
versions outside the range servesim models, KV offload tiers larger than the host, and chat
messages whose content is null. Each test fails without its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servesim.catalog.gpus import get_gpu
from servesim.cli import app
from servesim.config import EngineConfig, load_scenario
from servesim.config.vllm_version import version_notice
from servesim.errors import ConfigError
from servesim.serve.protocol import ApiError, Tokenizer, parse_request
from servesim.sim import simulate

LORA_POOLS = {
    "model": {"name": "meta-llama/Llama-3.1-8B"},
    "hardware": {"gpu": "H100-SXM"},
    "cluster": {
        "router": "round_robin",
        "pools": [
            {
                "name": "chat",
                "engine": {"lora": {"enabled": True, "adapters": [{"name": "chat", "rank": 8}]}},
            },
            {"name": "sql", "engine": {"lora": {"enabled": True, "adapters": [{"name": "sql", "rank": 8}]}}},
            {"name": "plain"},
        ],
    },
}


def _scenario(tmp_path: Path, body: dict, trace_rows: list[str] | None = None) -> Path:
    if trace_rows is not None:
        trace = tmp_path / "trace.csv"
        trace.write_text(
            "arrived_at_s,num_prompt_tokens,num_output_tokens,adapter\n" + "\n".join(trace_rows) + "\n"
        )
        body = {**body, "workload": {"type": "trace", "path": str(trace)}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _routed(path: Path) -> dict[str, int]:
    res = simulate(load_scenario(path))
    return {p["name"]: p["num_routed"] for p in res.summary["pools"]}


def test_adapter_requests_reach_only_the_pools_that_serve_their_adapter(tmp_path: Path) -> None:
    """Round robin over three pools: 'sql' rows go to pool sql, 'chat' rows to pool chat, the
    base-model rows (empty cell) in turn to all three. Before the fix every row went round
    the three pools (2 each)."""
    rows = [f"{t},64,4,{a}" for t, a in enumerate(["sql", "sql", "sql", "chat", "", "", ""])]
    assert _routed(_scenario(tmp_path, LORA_POOLS, rows)) == {"chat": 1 + 1, "sql": 3 + 1, "plain": 1}


def test_drawn_adapters_leave_the_plain_pool_only_base_requests(tmp_path: Path) -> None:
    """A LoRA pool beside a plain pool of the same model, adapters drawn with base_fraction 0:
    every request names an adapter, so the plain pool (no adapters) gets none."""
    body = {
        **LORA_POOLS,
        "cluster": {
            "router": "round_robin",
            "pools": [
                {"name": "lora", "engine": {"lora": {"enabled": True, "num_adapters": 4}}},
                {"name": "plain"},
            ],
        },
        "workload": {
            "type": "synthetic",
            "num_requests": 12,
            "prompt_len": {"value": 64},
            "output_len": {"value": 4},
        },
    }
    assert _routed(_scenario(tmp_path, body)) == {"lora": 12, "plain": 0}


def test_an_adapter_no_pool_serves_is_refused_at_start_up(tmp_path: Path) -> None:
    path = _scenario(tmp_path, LORA_POOLS, ["0,64,4,sql", "1,64,4,summarize"])
    with pytest.raises(
        ConfigError, match=r"adapter column names 'summarize', not among engine.lora's adapters"
    ):
        simulate(load_scenario(path))


def test_lora_pools_of_one_model_that_draw_differently_are_refused(tmp_path: Path) -> None:
    body = {
        **LORA_POOLS,
        "workload": {
            "type": "synthetic",
            "num_requests": 4,
            "prompt_len": {"value": 64},
            "output_len": {"value": 4},
        },
    }
    with pytest.raises(ConfigError, match=r"the LoRA pools of meta-llama/Llama-3.1-8B \(chat, sql\) draw"):
        simulate(load_scenario(_scenario(tmp_path, body)))


# ---------------------------------------------------------------------- engine.version


@pytest.mark.parametrize("bad", ["banana", "1", "0..19", "0.19.0.0.0", "1e3", ""])
def test_a_malformed_version_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a vLLM version"):
        EngineConfig(version=bad)


@pytest.mark.parametrize("good", ["0.19.0", "v0.15", "0.11.0rc2", "0.15.1.post1", "0.10.2.dev57+g1234abc"])
def test_well_formed_versions_are_taken(good: str) -> None:
    assert EngineConfig(version=good).version == good


def test_a_version_as_a_yaml_number_asks_for_quotes() -> None:
    with pytest.raises(ValueError, match="write the version in quotes"):
        EngineConfig.model_validate({"version": 0.1})  # YAML's reading of 0.10


@pytest.mark.parametrize(
    "version, used",
    [
        ("0.1.0", "0.10.1"),
        ("0.10.0", "0.10.1"),
        ("9.0", "0.32"),
        ("0.33.0", "0.32"),
        ("0.10.1", ""),
        ("0.32.5", ""),
    ],
)
def test_a_version_outside_the_known_range_gets_a_notice(version: str, used: str) -> None:
    line = version_notice(version)
    assert (f"vLLM {used}'s behaviour is used" in line) if used else line == ""


def test_the_notice_reaches_the_summary_once(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "engine: {version: '9.0'}\ncluster: {pools: [{name: a}, {name: b}]}\n"
        "workload: {type: synthetic, num_requests: 4, prompt_len: {value: 64}, output_len: {value: 4}}\n"
    )
    notices = [n for n in simulate(load_scenario(path)).summary["notices"] if n["code"] == "version_outside"]
    assert [n["message"] for n in notices] == [version_notice("9.0")]


# ---------------------------------------------------------------------- KV offload and host memory


def test_the_catalog_gives_each_gpu_its_share_of_the_node_memory() -> None:
    assert get_gpu("H100-SXM").host_mem_bytes == 2048 / 8 * 2**30  # DGX H100: 2 TiB for 8 GPUs
    assert get_gpu("L4").host_mem_bytes == 768 / 8 * 2**30  # g6.48xlarge: 768 GiB for 8


@pytest.mark.parametrize(
    "tp, gib, host, refused",
    [
        (1, 256, None, False),
        (1, 257, None, True),
        (4, 1024, None, False),
        (4, 1025, None, True),
        (1, 300, 512, False),
    ],
)
def test_an_offload_tier_beyond_the_host_memory_is_refused(
    tmp_path: Path, tp: int, gib: float, host: float | None, refused: bool
) -> None:
    path = tmp_path / "s.yaml"
    hw = {"gpu": "H100-SXM", **({"host_mem_gib_per_gpu": host} if host else {})}
    body = {
        "model": {"name": "meta-llama/Llama-3.1-8B"},
        "hardware": hw,
        "parallel": {"tensor_parallel_size": tp},
        "engine": {"kv_offload": {"cpu_size_gib": gib}},
        "workload": {
            "type": "synthetic",
            "num_requests": 2,
            "prompt_len": {"value": 64},
            "output_len": {"value": 4},
        },
    }
    path.write_text(yaml.safe_dump(body))
    args = ["simulate", str(path), "--quiet", "--no-progress", "--output", str(tmp_path / "o")]
    res = CliRunner().invoke(app, args)
    if not refused:
        assert res.exit_code == 0, res.output
        return
    assert res.exit_code == 2
    assert (
        f"engine.kv_offload.cpu_size_gib: {gib:g} GiB exceeds the host memory of the replica's {tp} GPU(s): "
        f"{256 * tp:,} GiB (256 GiB per GPU, the catalog's H100-SXM node)" in res.stderr
    )
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- servesim serve: null content


def _chat(messages: list[dict]) -> int:
    body = json.dumps({"model": "m", "messages": messages}).encode()
    try:
        return parse_request(body, True, "m", Tokenizer(), 0).prompts[0][0]
    except ApiError as err:
        return -err.status


@pytest.mark.parametrize("role", ["user", "system", "tool", "developer"])
def test_null_content_is_400_but_for_assistant_and_function(role: str) -> None:
    """vLLM validates messages with the OpenAI types and its own custom-role type: null
    content is accepted only where the OpenAI type says Optional (assistant, function)."""
    assert _chat([{"role": role, "content": None}]) == -400


def test_absent_content_and_null_assistant_content_are_read_as_empty_text() -> None:
    empty = _chat([{"role": "user", "content": ""}])
    assert empty > 0
    assert _chat([{"role": "user"}]) == empty  # the custom-role type: content optional
    assert _chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]) > empty


# ---------------------------------------------------------------------- inference-perf, guidellm files


def test_an_inference_perf_rate_yaml_reads_as_text_is_a_number() -> None:
    """YAML 1.1 reads 2e1 as the string '2e1'; inference-perf's pydantic models read it as 20.
    A constant stage sends int(rate x duration) requests (its ConstantLoadTimer): 20 x 3 = 60."""
    import numpy as np

    from servesim.workload.inference_perf import stage_arrivals

    cfg = yaml.safe_load("load: {type: constant, stages: [{rate: 2e1, duration: 3}]}")
    assert cfg["load"]["stages"][0]["rate"] == "2e1"
    times, stage = stage_arrivals(cfg, np.random.default_rng(0), "c.yaml")
    assert len(times) == 60 and set(stage.tolist()) == {0}


def test_a_guidellm_file_nested_past_the_parser_is_an_error(tmp_path: Path) -> None:
    from servesim.workload.guidellm import read_scenario

    path = tmp_path / "s.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="s.json: not readable: nested too deeply"):
        read_scenario(path)
