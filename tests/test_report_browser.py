"""The HTML report in a real browser: headless Chromium opens the page from disk (no network),
plotly.js loaded from the file beside it or embedded (--self-contained), every plot draws
(plotly's ``.main-svg`` with its traces' paths), no script error or console error, and a
screenshot shows the page; a page whose plotly.js file is missing says so.

Needs Debian's ``chromium`` (``apt-get install chromium``; .ci/run installs it and sets
SERVESIM_REQUIRE_BROWSER=1, so there a missing browser fails instead of skipping). Each browser
run is bounded by ``TIMEOUT_S``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("plotly")

from servesim.cli import app  # noqa: E402
from servesim.report import write_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        reason = "no headless Chromium (apt-get install chromium)"
        if os.environ.get("SERVESIM_REQUIRE_BROWSER"):
            pytest.fail(reason + ", and SERVESIM_REQUIRE_BROWSER is set")
        pytest.skip(reason)
    return found


def chromium(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page``; ``--virtual-time-budget`` lets the scripts finish first."""
    cmd = [
        browser(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--virtual-time-budget=20000",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        page.resolve().as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def console_errors(stderr: str) -> list[str]:
    """The page's console errors in Chromium's log (``CONSOLE`` lines of an error or uncaught throw)."""
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln and re.search(r"error|uncaught", ln, re.I)]


def drawn(dom: str) -> tuple[str | None, str | None]:
    body = re.search(r"<body([^>]*)>", dom)
    attrs = body[1] if body else ""
    n = re.search(r'data-plots-drawn="(\d+)"', attrs)
    err = re.search(r'data-errors="([^"]*)"', attrs)
    return (n[1] if n else None), (err[1] if err else None)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "run"
    res = CliRunner().invoke(
        app,
        [
            "simulate",
            str(ROOT / "examples" / "disaggregated.yaml"),
            "--set",
            "workload.num_requests=300",
            "--no-progress",
            "-q",
            "-o",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return out


def page_and_figures(page: Path) -> tuple[Path, list[dict]]:
    text = page.read_text(encoding="utf-8")
    figs = json.loads(re.search(r'id="figures">(.*?)</script>', text, re.S)[1].replace("<\\/", "</"))
    return page, figs


@pytest.fixture(scope="module")
def report_page(run_dir) -> tuple[Path, list[dict]]:
    page, _ = write_report(run_dir, run_dir.parent / "report.html")  # and plotly-VERSION.min.js beside it
    return page_and_figures(page)


@pytest.fixture(scope="module", params=["beside", "self-contained"])
def any_page(request, run_dir) -> tuple[Path, list[dict]]:
    if request.param == "beside":
        return request.getfixturevalue("report_page")
    [page] = write_report(run_dir, run_dir.parent / "whole" / "report.html", self_contained=True)
    return page_and_figures(page)


@pytest.mark.slow
def test_every_plot_draws_without_errors(any_page) -> None:
    page, figs = any_page
    res = chromium(page, "--dump-dom")
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    count, errors = drawn(dom)
    assert errors is None, errors
    assert count == str(len(figs)), "not every plot finished drawing"
    assert not console_errors(res.stderr), console_errors(res.stderr)
    starts = [(dom.index(f'id="{f["div"]}"'), f) for f in figs]
    for k, (at, fig) in enumerate(starts):
        part = dom[at : starts[k + 1][0] if k + 1 < len(starts) else len(dom)]
        assert 'class="main-svg"' in part, f"{fig['div']}: no plot drawn"
        traces = len(re.findall(r'class="trace (?:scatter|bars)', part))
        assert traces == len(fig["data"]), f"{fig['div']}: {traces} of {len(fig['data'])} traces drawn"
        assert re.search(r'<path[^>]*\bd="M[\d.]', part), f"{fig['div']}: the traces are empty"


@pytest.mark.slow
def test_the_checks_see_a_broken_page(tmp_path) -> None:
    """The error checks are not blind: a page whose script throws is caught."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body><script>window.addEventListener('error', function (e) {"
        "document.body.setAttribute('data-errors', e.message);});</script>"
        "<script>undefinedFunction();</script></body></html>"
    )
    res = chromium(page, "--dump-dom")
    _, errors = drawn(res.stdout)
    assert errors and "undefinedFunction" in errors
    assert console_errors(res.stderr)


@pytest.mark.slow
def test_a_page_without_its_plotly_js_says_so(report_page, tmp_path) -> None:
    """Moved away from its plotly-VERSION.min.js, the page shows why nothing is drawn."""
    page = tmp_path / "moved.html"
    page.write_text(report_page[0].read_text(encoding="utf-8"), encoding="utf-8")
    res = chromium(page, "--dump-dom")
    count, errors = drawn(res.stdout)
    assert count is None and errors and "plotly.js not loaded" in errors
    assert 'class="missing"' in res.stdout and "--self-contained" in res.stdout


@pytest.mark.slow
def test_screenshot(report_page, tmp_path) -> None:
    import matplotlib.image

    page, _ = report_page
    shot = tmp_path / "report.png"
    res = chromium(page, "--window-size=1400,2600", "--hide-scrollbars", f"--screenshot={shot}")
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    img = matplotlib.image.imread(shot)
    assert img.shape[:2] == (2600, 1400)
    assert img[..., :3].std() > 0.05  # not a blank page
