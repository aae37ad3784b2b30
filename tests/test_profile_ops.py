"""`servesim profile` (torch extra): time a tiny model's operators on the CPU, then calibrate
on them. Skipped when torch is not installed (CI does not install it). The checks before
timing, the progress bar and the rows kept on Ctrl-C are tested with a stand-in torch."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from typer.testing import CliRunner

from servesim import profile_ops
from servesim.calibration.measurements import read_operator_profiles
from servesim.catalog.hf_config import from_hf_config
from servesim.cli import app
from servesim.config import GpuConfig

TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


def test_profile_tiny_model_on_cpu_and_calibrate(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("scipy")
    from servesim.calibration.calibrate import calibrate_operators
    from servesim.profile_ops import profile_operators

    model = from_hf_config(TINY, "tiny")
    # One intra-op thread: on a machine whose cores are busy, torch's thread pool can make a
    # 1-token op wait milliseconds for its threads (a loaded CI host timed 16 ms for it).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        paths = profile_operators(
            model,
            tmp_path,
            "cpu",
            tokens=(1, 4, 16, 2048),
            contexts=(64,),
            batches=(1, 4),
            warmup=2,
            repeats=5,
        )
    finally:
        torch.set_num_threads(threads)
    assert [p.name for p in paths] == ["mlp.csv", "attention.csv"]
    (table,) = read_operator_profiles(tmp_path, ("cpu",))
    assert table.model == "tiny" and table.tp == 1 and table.num_tokens.tolist() == [1, 4, 16, 2048]
    assert set(table.times_s) == {"proj", "mlp", "elementwise"}
    assert all((v > 0).all() for v in table.times_s.values())
    assert (
        table.attention is not None
        and table.attention.is_prefill.any()
        and not table.attention.is_prefill.all()
    )
    cpu = GpuConfig(name="cpu", bf16_tflops=0.05, mem_gb=8, mem_bw_tb_per_s=0.02)
    from servesim.catalog.gpus import get_gpu

    eff, (res,) = calibrate_operators([table], gpu=get_gpu(cpu))
    assert all(0 < v <= 1 for k, v in res.params.items() if not k.endswith("_s"))
    # Bigger batches take longer (the direction of the effect), measured and fitted. 2,048
    # tokens are ~2,000x the FLOPs of one: far beyond the timing noise of a loaded machine
    # (at 64 tokens a CPU's fixed per-call cost can still hide the work).
    assert table.times_s["mlp"][-1] > 2 * table.times_s["mlp"][0]
    assert res.predicted_s[3] > res.predicted_s[0]


# ---------------------------------------------------------------- without torch: a fake module
# The checks before timing, the progress bar and the rows kept on Ctrl-C, run through the CLI
# with a stand-in torch module and a patched timer (no tensor is ever computed).

GRID = ["--tokens", "1,4,16,64", "--contexts", "64", "--repeats", "1"]
N_MLP = 4 * len(profile_ops.OPS)  # the mlp.csv timings of GRID
N_ATTENTION = 3 + len(profile_ops.DEFAULT_BATCHES)  # prefill of 4, 16, 64 at 64, decode batches


def _fake_torch(
    monkeypatch: pytest.MonkeyPatch, cuda: int = 0, mps: bool = False, cuda_build: bool = True
) -> MagicMock:
    torch = MagicMock(name="torch")
    torch.__version__ = "2.9.0+fake"
    torch.cuda.is_available.return_value = cuda > 0
    torch.cuda.device_count.return_value = cuda
    torch.xpu.is_available.return_value = False
    torch.backends.mps.is_available.return_value = mps
    torch.version.cuda = "12.4" if cuda_build else None
    torch.version.hip = None
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def _fake_timer(
    monkeypatch: pytest.MonkeyPatch, stop_after: int | None = None, error: BaseException | None = None
) -> list[int]:
    """Time nothing: each point takes 1-3 ms; the point after ``stop_after`` raises ``error``."""
    calls = [0]

    def timer(torch: Any, device: str, warmup: int, repeats: int) -> Callable[..., list[float]]:
        def run(fn: Callable[[], Any]) -> list[float]:
            if stop_after is not None and calls[0] == stop_after:
                raise error if error is not None else KeyboardInterrupt
            calls[0] += 1
            n = calls[0]
            return [1.0 + n * 1e-3, 2.0 + n * 1e-3, 3.0 + n * 1e-3]

        return run

    monkeypatch.setattr(profile_ops, "_timer", timer)
    return calls


def _tiny_config(tmp_path: Path) -> str:
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY))
    return str(path)


def _profile(tmp_path: Path, *args: str) -> Any:
    res = CliRunner().invoke(
        app,
        ["profile", _tiny_config(tmp_path), "--output", str(tmp_path / "out"), "--no-progress", *GRID, *args],
    )
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    return res


def _refused(res: Any, tmp_path: Path) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert not (tmp_path / "out").exists()
    return lines[0]


def _folder(tmp_path: Path) -> Path:
    return tmp_path / "out" / "compute" / "cpu" / "tiny"


def test_profile_without_torch_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    line = _refused(_profile(tmp_path), tmp_path)
    assert "needs torch" in line and "pip install 'servesim[profile]'" in line


@pytest.mark.parametrize(
    ("device", "torch_kw", "why"),
    [
        ("cuda", {}, "(CUDA not available; devices here: cpu)"),
        (
            "cuda:0",
            {"cuda_build": False},
            "(CUDA not available: this torch build has no CUDA support; devices here: cpu)",
        ),
        (
            "cuda:3",
            {"cuda": 2},
            "(CUDA device 3 does not exist: 2 CUDA devices, cuda:0 to cuda:1; "
            "devices here: cpu, cuda:0, cuda:1)",
        ),
        ("mps", {}, "(MPS not available; devices here: cpu)"),
        ("gpu", {}, "(expected one of cpu, cuda, mps, xpu, optionally with an index such as cuda:1; "),
        ("cuda:x", {"cuda": 1}, "(expected one of cpu, cuda, mps, xpu"),
    ],
)
def test_profile_refuses_a_device_torch_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, torch_kw: dict[str, Any], why: str
) -> None:
    _fake_torch(monkeypatch, **torch_kw)
    calls = _fake_timer(monkeypatch)
    line = _refused(_profile(tmp_path, "--device", device), tmp_path)
    assert line.startswith(
        f"error: --device {device}: the installed torch (version 2.9.0+fake) cannot use it ("
    )
    assert why in line
    assert calls == [0]


def test_profile_accepts_an_available_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = _fake_torch(monkeypatch, cuda=2)
    _fake_timer(monkeypatch)
    res = _profile(tmp_path, "--device", "cuda:1")
    assert res.exit_code == 0, res.output
    torch.randn.assert_called()
    assert torch.randn.call_args.kwargs["device"] == "cuda:1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", ""], "error: --tokens: expected at least one positive integer, got none"),
        (["--tokens", "0,4"], "error: --tokens: 0 is not a positive integer"),
        (["--tokens", "4,8,4"], "error: --tokens: 4 is given more than once"),
        (["--tokens", "1,two"], "error: --tokens: expected comma-separated integers, got '1,two'"),
        (["--contexts", "-64"], "error: --contexts: -64 is not a positive integer"),
        (["--repeats", "0"], "error: --repeats: 0; expected at least 1"),
        (["--tp", "0"], "error: --tp: 0; expected a tensor-parallel degree of at least 1"),
        (
            ["--tp", "3"],
            "error: --tp: 3 does not divide the 4 attention heads of tiny (vLLM requires it); "
            "expected one of 1, 2, 4",
        ),
        (["--device-name", "a/b"], "error: --device-name 'a/b': expected a plain directory name"),
    ],
)
def test_profile_refuses_bad_options_before_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    _fake_torch(monkeypatch)
    calls = _fake_timer(monkeypatch)
    assert _refused(_profile(tmp_path, *args), tmp_path).startswith(message)
    assert calls == [0]


def test_profile_output_that_is_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "compute").write_text("not a folder")
    res = _profile(tmp_path)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "exists and is not a directory" in lines[0]


def test_fake_profile_writes_what_calibrate_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch)
    calls = _fake_timer(monkeypatch)
    res = _profile(tmp_path)
    assert res.exit_code == 0, res.output
    assert (
        calls
        == [N_MLP + N_ATTENTION]
        == [profile_ops.count_points((1, 4, 16, 64), (64,), profile_ops.DEFAULT_BATCHES)]
    )
    folder = _folder(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["attention.csv", "mlp.csv"]
    with (folder / "mlp.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == profile_ops.MLP_FIELDS
    assert [r["num_tokens"] for r in rows] == ["1", "4", "16", "64"]
    assert (folder / "mlp.csv").read_bytes().count(b"\r\n") == 5  # csv's line ends, as before
    (table,) = read_operator_profiles(tmp_path / "out", ("cpu",))
    assert table.model == "tiny" and table.num_tokens.tolist() == [1, 4, 16, 64]
    assert table.attention is not None and table.attention.is_prefill.any()


def test_ctrl_c_keeps_the_complete_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch, stop_after=2 * len(profile_ops.OPS) + 3)  # in the third token count
    folder = _folder(tmp_path)
    folder.mkdir(parents=True)
    (folder / "mlp.csv").write_text("an earlier run's profile\n")
    res = _profile(tmp_path)
    assert res.exit_code == 130, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"interrupted after 23 of {N_MLP + N_ATTENTION} timings; kept 2 of 4 mlp rows (mlp.partial.csv) in "
    )
    assert str(folder) in lines[0]
    assert sorted(p.name for p in folder.iterdir()) == ["mlp.csv", "mlp.partial.csv"]
    assert (folder / "mlp.csv").read_text() == "an earlier run's profile\n"  # untouched
    with (folder / "mlp.partial.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["num_tokens"] for r in rows] == ["1", "4"] and all(r["time_stats.add.std"] for r in rows)


def test_ctrl_c_in_attention_keeps_both_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch, stop_after=N_MLP + 2)
    res = _profile(tmp_path)
    assert res.exit_code == 130, res.output
    assert (
        "kept 4 of 4 mlp rows (mlp.partial.csv) and 2 of 6 attention rows (attention.partial.csv)"
        in res.stderr
    )
    folder = _folder(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["attention.partial.csv", "mlp.partial.csv"]
    # Renamed, the kept rows are a profile calibrate reads.
    for stem in ("mlp", "attention"):
        (folder / f"{stem}.partial.csv").rename(folder / f"{stem}.csv")
    (table,) = read_operator_profiles(tmp_path / "out", ("cpu",))
    assert table.num_tokens.tolist() == [1, 4, 16, 64]


def test_ctrl_c_before_a_row_is_complete_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch, stop_after=3)
    res = _profile(tmp_path)
    assert res.exit_code == 130 and "no row was complete, nothing was kept" in res.stderr
    assert not (tmp_path / "out").exists()


def test_out_of_memory_mid_way_is_one_line_and_keeps_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = _fake_torch(monkeypatch, cuda=1)

    class OutOfMemoryError(RuntimeError):
        pass

    torch.OutOfMemoryError = OutOfMemoryError
    _fake_timer(
        monkeypatch,
        stop_after=len(profile_ops.OPS) + 1,
        error=OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB\nmore detail"),
    )
    res = _profile(tmp_path, "--device", "cuda")
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(
        "error: cuda ran out of memory (CUDA out of memory. Tried to allocate 2 GiB); stopped after 11 of "
    )
    assert "kept 1 of 4 mlp rows" in lines[0]


class _Bar:
    """Records what the progress bar is told."""

    made: list[_Bar] = []

    def __init__(self, total: int) -> None:
        self.total, self.task_ids, self.completed, self.descriptions = total, [0], 0, []
        self.started = self.stopped = False
        _Bar.made.append(self)

    def update(
        self, task: int, description: str | None = None, advance: int = 0, completed: int | None = None
    ) -> None:
        self.completed = completed if completed is not None else self.completed + advance
        if description is not None:
            self.descriptions.append(description)

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_Bar]]:
    _Bar.made = []
    monkeypatch.setattr(profile_ops, "_make_bar", _Bar)
    monkeypatch.setattr(profile_ops, "_stderr_is_tty", lambda: True)
    yield _Bar.made


def test_progress_bar_counts_every_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bars: list[_Bar]
) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch)
    res = CliRunner().invoke(app, ["profile", _tiny_config(tmp_path), "-o", str(tmp_path / "out"), *GRID])
    assert res.exit_code == 0, res.output
    (bar,) = bars
    assert bar.total == N_MLP + N_ATTENTION and bar.completed == bar.total and bar.started and bar.stopped
    assert bar.descriptions[0] == "emb at 1 tokens"
    assert bar.descriptions[-1].startswith("attention, decode of 16")
    assert len(bar.descriptions) == bar.total


def test_no_progress_shows_no_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bars: list[_Bar]) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch)
    assert _profile(tmp_path).exit_code == 0  # --no-progress
    assert bars == []


def test_progress_bar_is_stopped_on_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bars: list[_Bar]
) -> None:
    _fake_torch(monkeypatch)
    _fake_timer(monkeypatch, stop_after=5)
    res = CliRunner().invoke(app, ["profile", _tiny_config(tmp_path), "-o", str(tmp_path / "out"), *GRID])
    assert res.exit_code == 130
    (bar,) = bars
    assert bar.stopped and bar.completed == 5


def test_real_progress_bar_has_a_time_left_column() -> None:
    from rich.progress import TimeRemainingColumn

    bar = profile_ops._make_bar(10)
    assert any(isinstance(c, TimeRemainingColumn) for c in bar.columns)
