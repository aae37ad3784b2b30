"""``servesim reproduce``: every paper of the literature is listed with its published figure
and setup, and the quick runs whose figures land in the paper's range are held to that range
(the paper's bounds, never servesim's earlier output)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from servesim.cli import app
from servesim.papers import PAPERS, get_paper

#: The systems of the literature the project reproduces, by their papers.
SYSTEMS = ("Sarathi-Serve", "POLCA", "Block", "MicroServing", "Orca", "vLLM", "DistServe", "Splitwise",
           "Llumnix", "HeteroScale", "APEX", "Dynasor", "BurstGPT", "MC-SF")


def test_list_names_every_paper():
    res = CliRunner().invoke(app, ["reproduce", "--list"])
    assert res.exit_code == 0, res.output
    for name in SYSTEMS:
        assert name in res.output
    assert {p.name for p in PAPERS.values()} == set(SYSTEMS)


def test_every_paper_states_its_setup_and_figures():
    for p in PAPERS.values():
        assert set(p.setup) == {"model", "gpus", "workload", "slo", "baseline", "metric"}, p.key
        assert p.citation and p.headline
        for f in p.figures:
            assert f.lo < f.hi and f.published
        if p.figures == ():
            assert not p.runnable and p.note  # a characterization: says why there is nothing to run
        if not p.runnable:
            assert p.note, p.key


def test_names_resolve_and_unknown_ones_are_refused():
    assert get_paper("Sarathi-Serve") is get_paper("sarathi-serve") is PAPERS["sarathi-serve"]
    assert get_paper("MC_SF") is PAPERS["mc-sf"]
    res = CliRunner().invoke(app, ["reproduce", "no-such-paper"])
    assert res.exit_code == 2 and "unknown paper" in res.output
    res = CliRunner().invoke(app, ["reproduce", "block"])
    assert res.exit_code == 2 and "published figure and setup only" in res.output


def _quick(name: str, tmp_path) -> dict:  # noqa: ANN001
    res = CliRunner().invoke(app, ["reproduce", name, "--quick", "--output", str(tmp_path)])
    assert res.exit_code in (0, 1), res.output
    out = json.loads((tmp_path / "reproduce.json").read_text())
    assert (tmp_path / "rows.csv").exists() and (tmp_path / "figures.csv").exists()
    assert res.exit_code == (0 if all(f["in_range"] for f in out["figures"]) else 1)
    return {f["figure"]: f for f in out["figures"]}


def test_vllm_against_orca_lands_in_the_papers_ranges(tmp_path):
    """vLLM, Fig. 12: 1.7-2.7x Orca (Oracle), 2.7-8x Orca (Max)."""
    figs = _quick("vllm", tmp_path)
    assert 1.7 <= figs["vs_orca_oracle"]["servesim"] <= 2.7
    assert 2.7 <= figs["vs_orca_max"]["servesim"] <= 8.0


def test_orca_quick_run_reports_its_figure_out_of_range(tmp_path):
    """Orca's 36.9x is throughput at equal latency; servesim's saturation ratio is the
    E[max]/E[mean] bound of request-level batching, and the command says it is out of range."""
    figs = _quick("orca", tmp_path)
    assert figs["throughput"]["in_range"] is False and figs["throughput"]["servesim"] > 1.0
