"""``servesim report`` and ``servesim compare``: what the plots draw is what the run measured.

The runs are real simulations (a short synthetic workload; the disaggregated example, capped);
the plan and validation folders are tests/fixtures/report/ (plan/ from real simulations by
make_plan_fixture.py, validate/ from five-odd measured runs per group of the silicon suite).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script
from typer.testing import CliRunner

pytest.importorskip("plotly")
pytest.importorskip("matplotlib")

from servesim.cli import app  # noqa: E402
from servesim.report import figures, sampling, write_comparison, write_report  # noqa: E402
from servesim.report.rundir import open_run_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "report"
SYNTHETIC = [
    "--set",
    "workload={type: synthetic, num_requests: 400, seed: 3, arrival: {process: poisson, "
    "rate: 12}, prompt_len: {kind: lognormal, mean: 900, std: 600, max: 6000}, "
    "output_len: {kind: lognormal, mean: 160, std: 120, max: 1000}}",
]


def simulate_to(out: Path, *args: str) -> Path:
    res = CliRunner().invoke(
        app, ["simulate", *args, "--no-progress", "-q", "-o", str(out)], catch_exceptions=False
    )
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    return {
        "vllm_v1": simulate_to(base / "vllm_v1", *SYNTHETIC),
        "sarathi": simulate_to(base / "sarathi", *SYNTHETIC, "--set", "engine.policy=sarathi"),
        "disagg": simulate_to(
            base / "disagg",
            str(ROOT / "examples" / "disaggregated.yaml"),
            "--set",
            "workload.num_requests=300",
        ),
    }


def figures_of(page: str) -> list[dict]:
    data = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)
    assert data, "no figures in the page"
    return json.loads(data[1].replace("<\\/", "</"))


# --------------------------------------------------------------------------- the numbers


def test_cdfs_pass_through_the_summarys_percentiles(runs) -> None:
    """Same quantile definition as metrics.summary (inverted CDF): the curve hits p50/p90/p99 exactly."""
    run = open_run_dir(runs["vllm_v1"])
    for metric in ("ttft", "tpot", "e2e", "queue"):
        if metric == "queue":
            req = run.tables["requests"]
            values, weights = req["first_scheduled_s"] - req["arrival_s"], None
        else:
            values, weights = figures.latency_values(run, metric)
        for p in (0.5, 0.9, 0.99):
            x, _ = sampling.cdf(values, weights, np.array([p]))
            want = run.summary["latency"][f"{metric}_s"][f"p{round(p * 100)}"]
            assert x[0] == pytest.approx(want, rel=1e-12)


def test_itl_from_steps_is_the_engines_itl(runs) -> None:
    """On one replica the step records give exactly the engine's ITL samples (count and percentiles)."""
    from servesim.metrics.stats import distribution

    run = open_run_dir(runs["vllm_v1"])
    got = distribution(*sampling.itl_from_steps(run.tables["steps"]))
    want = run.summary["latency"]["itl_s"]
    assert got["count"] == want["count"]
    for k in ("mean", "p50", "p90", "p99", "max"):
        assert got[k] == pytest.approx(want[k], rel=1e-9), k


def test_itl_from_steps_on_a_disaggregated_run(runs) -> None:
    """Disaggregated: a request's first decode gap (prefill replica -> decode replica) is the only
    difference, so the counts differ by at most one per request, the percentiles hardly move and
    no gap is longer than the longest the engine saw (a decode replica's idle time is no gap)."""
    from servesim.metrics.stats import distribution

    run = open_run_dir(runs["disagg"])
    got = distribution(*sampling.itl_from_steps(run.tables["steps"]))
    want = run.summary["latency"]["itl_s"]
    assert abs(got["count"] - want["count"]) <= run.summary["counts"]["num_requests"]
    for k in ("p50", "p90", "p99"):
        assert got[k] == pytest.approx(want[k], rel=0.02), k
    assert got["max"] <= want["max"]


def test_time_series_conserve_the_runs_totals(runs) -> None:
    run = open_run_dir(runs["disagg"])
    plots = {p.id: p for p in figures.run_plots(run)}
    flow = plots["arrivals"]
    width = flow.traces[0].x[1] - flow.traces[0].x[0]
    for tr in flow.traces:  # arrivals and completions: every request once
        assert sum(tr.y) * width == pytest.approx(run.summary["counts"]["num_requests"], rel=1e-6)
    assert [t.name for t in plots["kv_use"].traces] == ["prefill", "decode"]
    peak = run.summary["utilization"]["overall"]["kv_peak"]
    for tr in plots["kv_use"].traces:  # a bin's mean never passes the run's peak
        assert 0 <= np.nanmax(np.array(tr.y, float)) <= peak + 1e-9
    util = plots["utilization"]
    busy = next(t for t in util.traces if t.name == "busy")
    assert busy.x == ["prefill 0", "prefill 1", "decode 2"]
    assert busy.y == pytest.approx(
        [r["busy_fraction"] for r in run.summary["utilization"]["replicas"]], rel=1e-5
    )


def test_timeseries_file_is_plotted_per_pool(runs, tmp_path) -> None:
    """A run folder's timeseries.csv (t_s, pool, metrics): one plot per metric, one line per pool,
    binned to at most MAX_BINS points when longer."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(runs["disagg"], run_dir)
    t = np.arange(0, 120, 0.1)
    cols = [
        "arrivals",
        "queue_len",
        "running",
        "batch_tokens",
        "kv_util",
        "replicas",
        "power_w",
        "slo_attainment",
    ]
    lines = ["t_s,pool," + ",".join(cols)]
    for pool, scale in (("prefill", 1.0), ("decode", 2.0)):
        lines += [f"{x:.1f},{pool}," + ",".join(f"{scale * (k + 1):g}" for k in range(len(cols))) for x in t]
    (run_dir / "timeseries.csv").write_text("\n".join(lines) + "\n")
    plots = {p.id: p for p in figures.run_plots(open_run_dir(run_dir))}
    for k, col in enumerate(cols):
        p = plots[f"ts_{col}"]
        assert [tr.name for tr in p.traces] == ["prefill", "decode"]
        for tr, scale in zip(p.traces, (1.0, 2.0)):
            assert len(tr.x) <= sampling.MAX_BINS
            assert np.nanmax(np.array(tr.y, float)) == pytest.approx(scale * (k + 1))


# --------------------------------------------------------------------------- the files


def test_run_report_is_one_offline_page_with_every_plot(runs, tmp_path) -> None:
    from servesim.report.html import plotly_js_name

    path, js = write_report(runs["disagg"], tmp_path / "r.html")
    assert js == tmp_path / plotly_js_name() and re.fullmatch(r"plotly-\d+\.\d+\.\d+\.min\.js", js.name)
    assert re.search(r"plotly\.js v\d", js.read_text(encoding="utf-8")[:200])
    page = path.read_text(encoding="utf-8")
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)
    assert "http" not in markup  # nothing fetched: styles inline, plotly.js a file beside the page
    assert re.findall(r"<script[^>]*\bsrc=\"([^\"]*)\"", page) == [js.name]
    assert page.count("Plotly.newPlot") == 1 and not re.findall(r"plotly\.js v\d", page)
    assert path.stat().st_size < 150_000  # the page weighs what its data weighs, not plotly's 4.8 MB
    ids = [f["div"].split("-", 2)[2] for f in figures_of(page)]
    assert ids == [
        "cdf_ttft",
        "cdf_tpot",
        "cdf_itl",
        "cdf_e2e",
        "arrivals",
        "queue",
        "batch",
        "batch_tokens",
        "kv_use",
        "utilization",
    ]
    assert "prefill: 2 x H100-SXM, decode: 1 x A100-80GB" in page  # the summary table


def test_pages_of_a_folder_share_one_plotly_js(runs, tmp_path) -> None:
    """A second page in the folder reuses the copy (not rewritten); --self-contained embeds it once."""
    _, js = write_report(runs["vllm_v1"], tmp_path / "a.html")
    mtime = js.stat().st_mtime_ns
    _, js2 = write_comparison([runs["vllm_v1"], runs["sarathi"]], tmp_path / "b.html")
    assert js2 == js and js.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html", js.name]
    [whole] = write_report(runs["vllm_v1"], tmp_path / "whole" / "c.html", self_contained=True)
    page = whole.read_text(encoding="utf-8")
    assert "<script src=" not in page and '<script id="plotly-js"' not in page
    assert len(re.findall(r"plotly\.js v\d", page)) == 1 and page.count("Plotly.newPlot") == 1
    assert list(whole.parent.iterdir()) == [whole]
    res = CliRunner().invoke(
        app,
        [
            "report",
            str(runs["vllm_v1"]),
            "-o",
            str(tmp_path / "cli" / "d.html"),
            "--self-contained",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0 and [p.name for p in (tmp_path / "cli").iterdir()] == ["d.html"], res.output


def test_plan_folder_ranked_table_and_fronts(tmp_path) -> None:
    """The fixture is a real plan's candidates.json and pareto.json (make_plan_fixture.py)."""
    run = open_run_dir(FIXTURES / "plan")
    path = write_report(FIXTURES / "plan", tmp_path / "plan.html")[0]
    page = path.read_text(encoding="utf-8")
    rows = json.loads((FIXTURES / "plan" / "candidates.json").read_text())["candidates"]
    ranked = sorted((r for r in rows if r["rank"] is not None), key=lambda r: r["rank"])
    assert ranked and len(ranked) < len(rows)  # some miss the SLOs or were pruned
    order = [page.index(f"<td>{r['label']}</td>") for r in ranked]
    assert order == sorted(order)  # in the plan's rank order
    unranked = [r for r in rows if r["rank"] is None]
    assert all(page.index(f"<td>{r['label']}</td>") > order[-1] for r in unranked)
    plots = {p.id: p for p in figures.run_plots(run)}
    fronts = json.loads((FIXTURES / "plan" / "pareto.json").read_text())
    assert fronts["cost_vs_latency"] and fronts["cost_vs_energy"]
    by_id = {r["id"]: r for r in rows}
    for name, metric in (("cost_vs_latency", "e2e_p90_s"), ("cost_vs_energy", "j_per_output_token")):
        plot = plots[f"pareto_{metric}"]
        [front] = [t for t in plot.traces if t.dash]
        assert name in front.name  # each front on its own metric's plot
        assert front.x == sorted(by_id[f["id"]]["usd_per_hour"] for f in fronts[name])
        by_cost = sorted(fronts[name], key=lambda f: f["usd_per_hour"])
        assert front.y == pytest.approx([f[metric] for f in by_cost], rel=1e-5)
        markers = {t.name: len(t.x) for t in plot.traces if t.kind == "markers"}
        simulated = [r for r in rows if r["status"] == "simulated"]
        assert markers == {
            "meets SLO": sum(r["meets_slo"] for r in simulated),
            "misses SLO": sum(not r["meets_slo"] for r in simulated),
        }
    assert "Pareto front" in page
    assert re.search(r'id="plot-\d+-pareto_e2e_p90_s"', page)


def test_report_of_a_real_plan_folder(tmp_path) -> None:
    """`servesim plan --output DIR` then `servesim report DIR`: a Pareto section with plots (the
    Parquet table read), and --format png writes one image per plot."""
    out = tmp_path / "plan"
    args = [
        "plan",
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "H100,L40S",
        "--total-gpus",
        "2",
        "--isl",
        "512",
        "--osl",
        "128",
        "--rate",
        "4",
        "--ttft",
        "1",
        "--tpot",
        "0.05",
        "--num-requests",
        "60",
        "--backend",
        "inprocess",
        "--no-progress",
        "--output",
        str(out),
    ]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert (out / "candidates.parquet").is_file()
    page = write_report(out, tmp_path / "plan.html")[0]
    figs = figures_of(page.read_text(encoding="utf-8"))
    ids = [f["div"].split("-", 2)[2] for f in figs]
    assert ids[:2] == ["pareto_e2e_p90_s", "pareto_j_per_output_token"]
    assert all(any(len(d["x"]) for d in f["data"]) for f in figs)
    res = CliRunner().invoke(
        app, ["report", str(out), "--format", "png", "-o", str(tmp_path / "png"), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    pngs = sorted((tmp_path / "png").glob("*.png"))
    assert [p.stem for p in pngs] == sorted(ids)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_png_of_a_folder_without_plots_fails(tmp_path) -> None:
    """Nothing to draw: a clear error and a non-zero exit, not 'wrote' and nothing."""
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "candidates.json").write_text('{"candidates": []}')
    res = CliRunner().invoke(app, ["report", str(tmp_path / "plan"), "--format", "png", "--no-progress"])
    assert res.exit_code != 0
    assert "nothing to draw" in res.output
    assert not (tmp_path / "plan" / "plots").exists()


def test_validation_folder_scatter_per_group(tmp_path) -> None:
    import csv

    with (FIXTURES / "validate" / "silicon_runs.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if not r["skipped"]]
    plots = {p.id: p for p in figures.run_plots(open_run_dir(FIXTURES / "validate"))}
    for metric in ("ttft", "tpot"):
        p = plots[f"validate_{metric}"]
        groups = [t for t in p.traces if t.kind == "markers"]
        assert {t.name for t in groups} == {r["group"] for r in rows}
        assert sum(len(t.x) for t in groups) == len(rows)
        one = groups[0]
        meas = [float(r[f"measured_{metric}_ms"]) for r in rows if r["group"] == one.name]
        assert one.x == pytest.approx(meas, rel=1e-5)
    path = write_report(FIXTURES / "validate", tmp_path / "v.html")[0]
    assert "all runs" in path.read_text(encoding="utf-8")  # the group table


def test_capacity_folder_plots_every_probe(tmp_path) -> None:
    """servesim capacity --report: the result table and each probe, passing and failing apart."""
    import csv

    from typer.testing import CliRunner

    from servesim.cli import app

    out = tmp_path / "cap"
    res = CliRunner().invoke(
        app,
        [
            "capacity",
            str(ROOT / "examples" / "capacity_slo.yaml"),
            "--precision",
            "0.3",
            "--no-progress",
            "--output",
            str(out),
            "--report",
        ],
    )
    assert res.exit_code == 0, res.output
    with (out / "probes.csv").open() as f:
        probes = list(csv.DictReader(f))
    result = json.loads((out / "capacity.json").read_text())["result"]
    plots = {p.id: p for p in figures.run_plots(open_run_dir(out))}
    att = plots["capacity_attainment"]
    by_name = {t.name: t for t in att.traces}
    passed = sorted(float(p["rate_rps"]) for p in probes if p["meets"] == "True")
    assert sorted(by_name["meets the SLO"].x) == pytest.approx(passed)
    assert sum(len(t.x) for t in att.traces) == len(probes)
    assert max(passed) == pytest.approx(result["capacity_rps"])
    page = (out / "report.html").read_text(encoding="utf-8")
    drawn = {f["div"].split("-", 2)[2] for f in figures_of(page)}
    assert drawn >= {"capacity_attainment", "capacity_ttft_p99_s"}
    assert page.count("<tr>") >= len(probes) + len(result)


def test_csv_records_draw_the_same_plots(runs, tmp_path) -> None:
    """--records-format csv: the same plots as from Parquet (empty cells are NaN, as written)."""
    csv_run = simulate_to(tmp_path / "csv", *SYNTHETIC, "--records-format", "csv")
    assert (csv_run / "requests.csv").is_file()
    got = figures.run_plots(open_run_dir(csv_run))
    want = figures.run_plots(open_run_dir(runs["vllm_v1"]))
    assert [p.id for p in got] == [p.id for p in want]

    def nan(v):  # the figures write NaN as None (a gap in the line)
        return [math.nan if e is None else e for e in v] if isinstance(v, list) else v

    for a, b in zip(got, want):
        for ta, tb in zip(a.traces, b.traces, strict=True):
            assert nan(ta.x) == pytest.approx(nan(tb.x), rel=1e-5, nan_ok=True), a.id
            assert nan(ta.y) == pytest.approx(nan(tb.y), rel=1e-5, nan_ok=True), a.id


def test_notices_are_listed(runs, tmp_path) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(runs["vllm_v1"], run_dir)
    doc = json.loads((run_dir / "summary.json").read_text())
    doc["notices"] = [
        {
            "code": "zero_length_raised",
            "source": "trace.csv",
            "count": 3,
            "message": "trace.csv: 3 rows had a prompt or output length of 0, raised to 1",
        }
    ]
    (run_dir / "summary.json").write_text(json.dumps(doc))
    page = write_report(run_dir)[0].read_text(encoding="utf-8")
    assert "<td>trace.csv: 3 rows had a prompt or output length of 0, raised to 1</td>" in page
    assert (run_dir / "report.html").is_file()  # the default place


def test_compare_overlays_the_runs(runs, tmp_path) -> None:
    path = write_comparison([runs["vllm_v1"], runs["sarathi"]], tmp_path / "c.html")[0]
    figs = figures_of(path.read_text(encoding="utf-8"))
    assert len(figs) == 4 and all(len(f["data"]) == 2 for f in figs)
    assert [d["name"] for d in figs[0]["data"]] == [str(runs["vllm_v1"]), str(runs["sarathi"])]


def test_static_images(runs, tmp_path) -> None:
    """PNG: every plot of a cluster run (lines and bars); SVG: a comparison's CDFs."""
    paths = write_report(runs["disagg"], tmp_path / "plots", "png")
    assert [p.stem for p in paths] == [p.id for p in figures.run_plots(open_run_dir(runs["disagg"]))]
    assert all(p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 10_000 for p in paths)
    svgs = write_comparison([runs["vllm_v1"], runs["sarathi"]], tmp_path / "svg", "svg")
    assert [p.name for p in svgs] == ["cdf_ttft.svg", "cdf_tpot.svg", "cdf_itl.svg", "cdf_e2e.svg"]
    import xml.etree.ElementTree as ET

    root = ET.parse(svgs[0]).getroot()
    assert root.tag.endswith("svg") and len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 10


def test_cli_report_compare_and_simulate_report(runs, tmp_path) -> None:
    res = CliRunner().invoke(app, ["report", str(runs["vllm_v1"]), "-o", str(tmp_path / "a.html")])
    assert res.exit_code == 0 and (tmp_path / "a.html").is_file(), res.output
    res = CliRunner().invoke(
        app,
        [
            "compare",
            str(runs["vllm_v1"]),
            str(runs["disagg"]),
            "-o",
            str(tmp_path / "c.html"),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0 and (tmp_path / "c.html").is_file(), res.output
    out = simulate_to(tmp_path / "s", *SYNTHETIC[:1], SYNTHETIC[1].replace("400", "50"), "--report")
    assert (out / "report.html").is_file()


# --------------------------------------------------------------------------- a million requests


@pytest.mark.slow
def test_a_million_request_report_stays_small(runs, tmp_path) -> None:
    """1M requests and 1M steps (records built here, not simulated): the page is the size of a
    small run's (plots are sampled), some tens of kB (plotly.js is a file beside it). How fast it is
    built is a benchmark (benchmarks/bench_report.py), not asserted here."""
    bench = load_script(ROOT / "benchmarks" / "bench_report.py")
    big = tmp_path / "big"
    bench.big_run(runs["vllm_v1"], big)  # the benchmark's run folder: 1M requests, 1M steps
    path = write_report(big, tmp_path / "big.html")[0]
    size = path.stat().st_size
    small = write_report(runs["vllm_v1"], tmp_path / "small.html")[0].stat().st_size
    assert size < 250_000, f"{size / 1e3:.0f} kB"
    assert size < small + 0.5e6  # no more than the extra utilization plot: sampling, not per request


def test_multi_model_run_has_a_row_per_model(tmp_path) -> None:
    """A run of several models (examples/multi_model.yaml, one minute): the Models table's
    rows are the models' figures, recomputed here from requests.parquet (each model's
    requests are those its replicas served: Llama's pool is replicas 0-1, Qwen's replica 2;
    percentiles of rank ceil(p n / 100); goodput over first arrival to last finish)."""
    import pyarrow.parquet as pq

    from servesim.report.tables import cell

    out = simulate_to(
        tmp_path / "mm", str(ROOT / "examples" / "multi_model.yaml"), "--set", "workload.duration_s=60"
    )
    page = write_report(out, tmp_path / "r.html")[0].read_text(encoding="utf-8")
    assert "<h2>Models</h2>" in page
    assert "SLO attainment (TTFT &lt;= 1 s, TPOT &lt;= 0.05 s)" in page
    rec = pq.read_table(out / "requests.parquet").to_pydict()
    arrival, first, done = (np.asarray(rec[k]) for k in ("arrival_s", "first_token_s", "finished_s"))
    n_out = np.asarray(rec["num_output_tokens"], np.float64)
    replica = np.asarray(rec["replica"])
    assert (np.asarray(rec["status"]) == np.asarray(rec["status"])[0]).all()  # all finished
    span = done.max() - arrival.min()
    ttft, e2e = first - arrival, done - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n_out > 1, (done - first) / (n_out - 1), np.nan)
    good = (ttft <= 1.0) & ~(tpot > 0.05)
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)
        if len(cells) == 16 and cells[1] != "base model":
            rows[cells[0]] = cells

    def pct(v: np.ndarray, p: int) -> str:
        v = np.sort(v[~np.isnan(v)])
        return cell(float(v[max(-(-p * v.size // 100) - 1, 0)]))

    models = (("meta-llama/Llama-3.1-8B", "llama", (0, 1)), ("Qwen/Qwen2.5-7B", "qwen", (2,)))
    assert list(rows) == [m[0] for m in models]
    for name, pool, replicas in models:
        mine = np.isin(replica, replicas)
        n = int(mine.sum())
        assert rows[name] == [
            name,
            name,
            pool,
            str(len(replicas)),
            str(len(replicas)),
            cell(n),
            cell(n),
            "0",
            *(pct(v[mine], p) for v in (ttft, tpot, e2e) for p in (50, 99)),
            cell(int((good & mine).sum()) / n),
            cell(int((good & mine).sum()) / span),
        ]
