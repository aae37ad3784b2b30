"""The CPU suite's recording sessions and the profiles fitted on them: a session's profile
fitted here (``session_profile``), and the cross-fit that fits on each recording of a session
in turn and predicts the others (``servesim validate --suite vllm-cpu --cross-fit``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servesim.perf.profiled import HardwareProfile
from servesim.validate.common import CPU_FIT_RECORDING, Check, load_bundled_profile
from servesim.validate.cpu_recordings import _run_metrics, simulated_metrics

#: A session folder's (or the recordings folder's) description of the machine, for fits.
CPU_HARDWARE = "cpu.yaml"


def cpu_sessions(recordings_dir: Path) -> list[tuple[str, Path]]:
    """The recording sessions under ``recordings_dir``: (case prefix, folder). The folder
    itself is one when it holds recordings; each subfolder holding a CPU_FIT_RECORDING is
    another."""
    subs = [d for d in sorted(recordings_dir.iterdir()) if d.is_dir() and (d / CPU_FIT_RECORDING).is_file()]
    top = [("", recordings_dir)] if any(recordings_dir.glob("*.json")) else []
    return [*top, *((f"{d.name}/", d) for d in subs)]


def session_profile(
    folder: Path, bundled: HardwareProfile, hardware: Path | None = None, fit_file: str = CPU_FIT_RECORDING
) -> HardwareProfile:
    """A profile fitted here on a session's ``fit_file`` (default CPU_FIT_RECORDING; needs
    scipy), on the hardware described by ``hardware`` (a YAML of hardware.gpu fields, like
    the bundled cpu.yaml) or else the bundled profile's (the CPU the bundled recordings ran on)."""
    from servesim.calibration.calibrate import calibrate_source
    from servesim.config import read_gpu_config

    hw = read_gpu_config(hardware) if hardware is not None else bundled.gpu
    prof, _ = calibrate_source(
        folder / fit_file, "engine-log", hardware=hw, name=f"fitted on {folder.name}/{fit_file}"
    )
    return prof


#: The request metrics the cross-fit reports (mean and P90 TTFT, TPOT and E2E).
CROSS_FIT_METRICS = ("mean_ttft_s", "p90_ttft_s", "mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s")


def _session_hardware(folder: Path, recordings_dir: Path) -> Path | None:
    return next((d / CPU_HARDWARE for d in (folder, recordings_dir) if (d / CPU_HARDWARE).is_file()), None)


def cross_fit_session(
    folder: Path,
    bundled: HardwareProfile,
    hardware: Path | None = None,
    prefix: str = "",
    fit_files: list[str] | None = None,
) -> list[Check]:
    """Fit on each recording of a session in turn (``fit_files``: those names only; default
    every recording) and predict every other recording of the session (held out): per fit,
    one row of the held-out errors of mean and P90 TTFT, TPOT, E2E (n = held-out recordings x
    6; its note: their median and max and where the max is) and one of the fit recording's
    own errors (in-sample). Needs scipy. Reference rows (no goal): what a profile fitted on
    one run does on the runs it never saw."""
    paths = sorted(folder.glob("*.json"))
    names = fit_files if fit_files is not None else [p.name for p in paths]
    measured = {p.name: _run_metrics(json.loads(p.read_text())["runs"][0]) for p in paths}
    checks = []
    for fit_name in names:
        prof = session_profile(folder, bundled, hardware, fit_name)
        errs: dict[str, list[tuple[str, float]]] = {"in-sample": [], "held out": []}
        for p in paths:
            sim = simulated_metrics(p, prof)
            part = "in-sample" if p.name == fit_name else "held out"
            errs[part] += [
                (f"{p.stem} {k}", (sim[k] / measured[p.name][k] - 1) * 100) for k in CROSS_FIT_METRICS
            ]
        fit_stem = Path(fit_name).stem
        for part, rows in errs.items():
            if not rows:
                continue
            e = np.array([v for _, v in rows])
            worst = rows[int(np.argmax(np.abs(e)))][0]
            n_rec = len(rows) // len(CROSS_FIT_METRICS)
            checks.append(
                Check(
                    "vllm-cpu",
                    f"cross-fit: fit on {prefix}{fit_stem}, {part} ({n_rec} recording{'s' * (n_rec > 1)})",
                    "mean and P90 TTFT, TPOT, E2E",
                    e,
                    None,
                    note=f"median |error| {np.median(np.abs(e)):.1f}%, "
                    f"max {np.max(np.abs(e)):.1f}% ({prefix}{worst})",
                )
            )
    return checks


def cross_fit_vllm_cpu(recordings_dir: Path, fit_files: list[str] | None = None) -> list[Check]:
    """``cross_fit_session`` for every session under ``recordings_dir`` (needs scipy)."""
    bundled = load_bundled_profile("cpu")
    checks: list[Check] = []
    for prefix, folder in cpu_sessions(recordings_dir):
        hardware = _session_hardware(folder, recordings_dir)
        checks += cross_fit_session(folder, bundled, hardware, prefix, fit_files)
    return checks
