"""Reading scenario input: files, duplicate keys, --set paths, renamed fields, messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from servesim.config import (
    SyntheticWorkload,
    TraceWorkload,
    load_scenario,
    scenario_from_dict,
)
from servesim.config.files import load_toml_text, load_yaml_text
from servesim.config.hardware import ParallelConfig
from servesim.config.messages import RENAMED
from servesim.errors import ConfigError

SMALL = {"type": "synthetic", "num_requests": 4}


def test_yaml_duplicate_key_names_key_and_lines() -> None:
    with pytest.raises(ConfigError, match=r"^f.yaml: line 3: duplicate key 'a' \(first given on line 1\)"):
        load_yaml_text("a: 1\nb: 2\na: 3\n", "f.yaml")
    # The same key in two different mappings, and merge keys, are not duplicates.
    assert load_yaml_text("x: {a: 1}\ny: {a: 2}\n", "f") == {"x": {"a": 1}, "y": {"a": 2}}
    text = "base: &b {a: 1, b: 2}\nuse: {<<: *b, b: 3}\n"
    assert load_yaml_text(text, "f")["use"] == {"a": 1, "b": 3}


def test_toml_duplicates_name_key_or_table() -> None:
    with pytest.raises(ConfigError, match=r"^f.toml: line 3: duplicate key 'engine.block_size'"):
        load_toml_text("[engine]\nblock_size = 16\nblock_size = 32\n", "f.toml")
    with pytest.raises(ConfigError, match=r"^f.toml: line 2: table \[run\] is declared twice"):
        load_toml_text("[run]\n[run]\n", "f.toml")
    with pytest.raises(ConfigError, match=r"^f.toml: line 3: duplicate key 'a'"):  # outside any table
        load_toml_text("b = 0\na = 1\na = 2\n", "f.toml")


def test_set_list_element_changes_only_that_element(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("cluster:\n  pools:\n    - {name: a, num_replicas: 1}\n    - {name: b, num_replicas: 1}\n")
    sc = load_scenario(f, ["cluster.pools.1.num_replicas=3", "cluster.pools.0.engine.max_num_seqs=8"])
    assert sc.cluster is not None
    a, b = sc.cluster.pools
    assert (a.num_replicas, b.num_replicas) == (1, 3)
    assert a.engine is not None and a.engine.max_num_seqs == 8 and b.engine is None


def test_set_one_variable_of_the_vllm_env_mapping() -> None:
    """engine.vllm_env is kept as sorted (name, value) pairs: --set names one variable of it."""
    sc = load_scenario(
        None, ["engine.vllm_env.VLLM_USE_DEEP_GEMM=0", "engine.vllm_env.VLLM_MXFP4_USE_MARLIN=1"]
    )
    assert sc.engine.vllm_env == (("VLLM_MXFP4_USE_MARLIN", "1"), ("VLLM_USE_DEEP_GEMM", "0"))


def test_set_workload_type_switches_whatever_the_order(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("workload: {type: trace, path: 'builtin:azure_conv', rate_scale: 2}\n")
    for order in (
        ["workload.type=synthetic", "workload.num_requests=7"],
        ["workload.num_requests=7", "workload.type=synthetic"],
    ):
        wl = load_scenario(f, order).workload
        assert isinstance(wl, SyntheticWorkload) and wl.num_requests == 7
    # Setting the type it already has changes nothing.
    wl = load_scenario(f, ["workload.type=trace"]).workload
    assert isinstance(wl, TraceWorkload) and wl.rate_scale == 2
    # And back: a synthetic file switched to a trace keeps only what is set after.
    wl = scenario_from_dict(
        {"workload": SMALL}, overrides=["workload.type=trace", "workload.path=builtin:azure_code"]
    ).workload
    assert isinstance(wl, TraceWorkload) and wl.path == "builtin:azure_code"


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_every_renamed_field_is_refused_with_its_new_name(old: str) -> None:
    new, unit = RENAMED[old]
    gpu = {"name": "x", "bf16_tflops": 1, "mem_gb": 8, "mem_bw_tb_per_s": 1}
    pool = {"name": "a", "links": {old: 1}}
    where = {
        "interconnect_gbps": ("hardware.gpu", {"hardware": {"gpu": {**gpu, old: 1}}}),
        "mem_bw_tbps": (
            "hardware.gpu",
            {"hardware": {"gpu": {**{k: v for k, v in gpu.items() if k != "mem_bw_tb_per_s"}, old: 1}}},
        ),
        "intra_node_gbps": ("cluster.pools.0.links", {"cluster": {"pools": [pool]}}),
        "inter_node_gbps": ("cluster.pools.0.links", {"cluster": {"pools": [pool]}}),
        "bandwidth_gbps": ("cluster.link", {"cluster": {"pools": [{"name": "a"}], "link": {old: 1}}}),
        "pcie_gbps": ("engine", {"engine": {old: 1}}),
        "swap_space_gb": ("engine", {"engine": {old: 1}}),
    }[old]
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(where[1], "s.yaml")
    assert str(err.value) == f"s.yaml: {where[0]}.{old}: was renamed to {new} ({unit})"


def test_unknown_key_suggests_the_field_meant() -> None:
    with pytest.raises(ConfigError, match=r"^s: workload.arrival.rte: unknown key; did you mean rate\?$"):
        scenario_from_dict({"workload": {**SMALL, "arrival": {"rte": 2}}}, "s")
    with pytest.raises(ConfigError, match=r"^s: engine.zzz: unknown key$"):
        scenario_from_dict({"engine": {"zzz": 1}}, "s")


def test_unknown_key_names_the_field_another_tool_calls_so_or_the_section_s_fields() -> None:
    with pytest.raises(
        ConfigError, match=r"^s: parallel.pp: unknown key; did you mean pipeline_parallel_size\?$"
    ):
        scenario_from_dict({"parallel": {"pp": 2}}, "s")
    # a short section lists its fields where nothing is close
    fields = ", ".join(sorted(ParallelConfig.model_fields))
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({"parallel": {"zzz": 2}}, "s")
    assert str(err.value) == f"s: parallel.zzz: unknown key (known: {fields})"
