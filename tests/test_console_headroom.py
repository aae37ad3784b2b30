"""The console's headroom row: the load served, and in a saturated run the arrivals beside it."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from servesim.metrics.console_lines import trust_lines

HEADROOM: dict[str, Any] = {
    "gpu_fraction": 1.0,
    "cpu_fraction": 0.0,
    "idle_fraction": 0.0,
    "api_server_fraction": None,
    "load_fraction": 0.745,
    "capacity_requests_per_s": 1.71,
    "per_replica": [{"limited_by": "kv_cache"}],
}


def _row(saturation: dict[str, Any] | None) -> str:
    grid = Table.grid()
    grid.add_column()
    grid.add_column()
    summary: dict[str, Any] = {"headroom": HEADROOM}
    if saturation is not None:
        summary["saturation"] = saturation
    trust_lines(summary, grid)
    console = Console(width=400, record=True)
    console.print(grid)
    return next(line for line in console.export_text().splitlines() if "Headroom" in line)


def test_an_unsaturated_run_reads_the_load_it_served() -> None:
    line = _row(None)
    assert "load 74.5% of ~1.71 req/s sustainable (kv cache bound)" in line
    assert "arrivals" not in line


def test_a_saturated_run_reads_its_arrivals_against_what_it_sustains() -> None:
    # 2.95 req/s arriving at a deployment that sustains 1.71: 172.5% offered; what it
    # served (74.5%) is capped by the deployment and would alone read as headroom
    sat = {
        "saturated": True,
        "verdict": "saturated",
        "cause": "arrivals",
        "hint": "",
        "evidence": {"arrival_rate_rps": 2.95, "served_rate_rps": 1.35},
    }
    line = _row(sat)
    assert "arrivals 172.5%, served 74.5% of ~1.71 req/s sustainable (kv cache bound)" in line
    assert "load " not in line
