"""The host floor each machine's runs imply: a diagnostic of the silicon suite, not a fit.

The kernel model bounds a step that runs without CUDA graphs from below by the host's
launching of its layers (``perf.kernel_model.EAGER_HOST_S_PER_LAYER``, 0.8 ms a reference
layer, scaled by each layer's kernel count: ``perf.cuda_graphs.eager_kernels_per_layer``),
one figure for every machine, fitted on Llama-3.1-70B's runs alone. This module asks each
(group, vLLM version, TP degree, image) of the 1k-prompt rows whose prefill steps run
without graphs which figure its own runs imply: every such row is simulated at the floors
of ``IMPLIED_GRID_S`` and the figure is where the median log error of mean TTFT crosses
zero, by linear interpolation between the two grid points around it (``floor_crossing``).
Nothing here changes a prediction; docs/fidelity.md section 5 ("The two groups over the
goal, row by row") quotes its table. Run it with
``PYTHONPATH=src python -m servesim.validate.silicon_floor`` (a few minutes: every
selected row at every grid point).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

#: Host floors (seconds a reference layer) at which the selected rows are simulated.
IMPLIED_GRID_S = (0.0, 0.4e-3, 0.6e-3, 0.8e-3, 1.0e-3, 1.2e-3, 1.6e-3)
#: The prompt length of the rows asked: a 1,024-token prefill is floor-bound wherever it runs
#: without graphs (its GPU time is below the floor in every group), an 8k one rarely.
ISL = "1024"


def floor_crossing(floors: Sequence[float], errors: Sequence[float]) -> float | None:
    """The floor at which ``errors`` (one median log error per grid floor, ascending floors;
    the error grows with the floor) crosses zero, interpolated linearly between the two grid
    points around it; an exact zero at a grid point is that point. None where it does not
    cross inside the grid (every error above zero: the runs imply less than the grid's
    first floor; every one below: more than its last)."""
    if len(floors) != len(errors) or len(floors) < 2:
        raise ValueError(
            f"floor_crossing: need one error per floor, at least two (got {len(floors)}, {len(errors)})"
        )
    for a, b, ea, eb in zip(floors, floors[1:], errors, errors[1:]):
        if ea == 0.0:
            return a
        if ea < 0.0 < eb or eb == 0.0:
            return a + (b - a) * (0.0 - ea) / (eb - ea)
    return None


@dataclass(frozen=True)
class ImpliedFloor:
    """One (group, version, TP, image) of eager 1k-prompt rows and the floor they imply."""

    group: str
    version: str
    tp: int
    image: str
    runs: int
    kernel_ratio: float  # the layer's eager kernels over a dense GQA layer's (the floor's scale)
    median_err: dict[float, float]  # grid floor -> median log(predicted / measured) of mean TTFT
    implied_s: float | None  # seconds a reference layer where the median error crosses zero

    def row(self) -> str:
        """A markdown table row: the group's errors with no floor and the shipped one, and
        the implied floor in ms a reference layer."""
        first, last = min(self.median_err), max(self.median_err)
        if self.implied_s is not None:
            implied = f"{self.implied_s * 1e3:.2f}"
        else:
            implied = f"< {first * 1e3:g}" if self.median_err[first] > 0 else f"> {last * 1e3:g}"
        err = {f: (math.exp(e) - 1) * 100 for f, e in self.median_err.items()}
        return (
            f"| {self.group} | {self.version or '(none)'} | {self.tp} | {self.image} | {self.runs} | "
            f"{self.kernel_ratio:.2f} | {err[first]:+.0f}% | {err.get(0.8e-3, math.nan):+.0f}% | {implied} |"
        )


def image_of(source: str) -> str:
    """The image a row names (its ``image=`` or the ``vllm/vllm-openai:`` tag of a database
    dump), else its source's first field."""
    for part in source.split(";"):
        part = part.strip()
        if part.startswith("image="):
            return part[len("image=") :]
        if part.startswith("vllm/vllm-openai:"):
            return part
    return source.split(";")[0].strip()


def implied_floors(rows: list[dict[str, str]], grid: Sequence[float] = IMPLIED_GRID_S) -> list[ImpliedFloor]:
    """Every (group, version, TP, image) of aggregated ``ISL``-token rows whose prefills run
    without CUDA graphs (above the largest capture size of a step holding a prefill), with
    the floor its rows imply (module doc)."""
    from servesim.config import Scenario
    from servesim.deployment import resolve_deployments
    from servesim.perf.kernel_model import EAGER_HOST_S_PER_LAYER
    from servesim.validate.silicon import MODELS, simulate_case
    from servesim.validate.silicon_cases import group_label, nvfp4_configs, row_case
    from servesim.validate.silicon_cross import host_floor

    keys: list[tuple[str, str, int, str, float]] = []
    chosen: list[dict[str, str]] = []
    with nvfp4_configs({p for (p, nv, _) in MODELS.values() if nv}) as tmp:
        for r in rows:
            if r["isl"] != ISL or r["mode"] != "agg":
                continue
            case = row_case(r, tmp)
            if case.scenario is None:
                continue
            sc = Scenario.model_validate(case.scenario)
            perf = resolve_deployments(sc)[0].perf
            floor = float(getattr(perf, "eager_floor", 0.0))
            graphs = getattr(perf, "graphs", None)
            if not floor or graphs is None or graphs.mixed_max_size >= int(r["isl"]):
                continue
            layers = perf.model.num_layers  # type: ignore[attr-defined]
            ratio = floor / (EAGER_HOST_S_PER_LAYER * layers)
            tp = sc.parallel.tensor_parallel_size
            keys.append((group_label(r), r["backend_version"], tp, image_of(r["silicon_data_source"]), ratio))
            chosen.append(r)
        errs: list[dict[float, float]] = [{} for _ in chosen]
        for f in grid:
            with host_floor(f):
                for i, r in enumerate(chosen):
                    c = simulate_case(row_case(r, tmp))
                    if not c.skip:
                        errs[i][f] = math.log(c.predicted_ttft_ms / c.measured_ttft_ms)
    by: dict[tuple[str, str, int, str, float], list[int]] = {}
    for i, k in enumerate(keys):
        if len(errs[i]) == len(grid):
            by.setdefault(k, []).append(i)
    out = []
    for (group, version, tp, image, ratio), idx in sorted(by.items()):
        med = {f: statistics.median(errs[i][f] for i in idx) for f in grid}
        out.append(
            ImpliedFloor(
                group,
                version,
                tp,
                image,
                len(idx),
                ratio,
                med,
                floor_crossing(list(grid), [med[f] for f in grid]),
            )
        )
    return out


TABLE_HEAD = (
    "| group | vLLM | TP | image | runs | kernels / reference | TTFT error, no floor | at 0.8 ms | "
    "implied ms a reference layer |\n|---|---|---|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    """Print the table of implied floors for the bundled silicon rows."""
    from servesim.validate.silicon_cases import read_silicon

    if argv:
        print("usage: python -m servesim.validate.silicon_floor (no arguments)", file=sys.stderr)
        return 2
    print(TABLE_HEAD)
    for f in implied_floors(read_silicon()):
        print(f.row())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
