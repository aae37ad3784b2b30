"""Power capping (POLCA, Patel et al., ASPLOS'24) of a cluster's row, applied at each tick of
``cluster.operations.Operations``: the row's GPU power over the last interval is compared
with ``budget_w``: above ``cap_low_at`` the low-priority pools run at ``capped_clock``,
above ``cap_all_at`` every pool does; a cap is lifted, one level an interval, when the power
the row would draw with it lifted (the last interval's work at the full clock) is
``hysteresis`` (the band, 0.1 of the budget by default) below its threshold
(``next_cap_level``). The clock slows compute-bound work and draws less power as
``servesim.perf.power`` models it (``clocked_pools``, ``interval_energy``). Simplification:
POLCA reacts within seconds through the GPU's power brake as well; here the capper acts once
per interval.
"""

from __future__ import annotations

from servesim.cluster.spec import PoolSpec
from servesim.config.operations import OperationsConfig, PowerCapConfig
from servesim.errors import ConfigError
from servesim.perf.capabilities import Clocked
from servesim.perf.power import ClockedPerf, PowerCoefficients, busy_energy_j


def clocked_pools(pools: list[PoolSpec], cfg: OperationsConfig) -> list[PoolSpec]:
    """``pools`` with perf models whose clock the power capper sets (when there is a budget)."""
    from dataclasses import replace

    if cfg.power is None:
        return pools
    out = []
    for p in pools:
        peak = p.gpu.flops_for("bfloat16") if p.gpu is not None else float("inf")
        out.append(replace(p, perf=ClockedPerf(p.perf, peak)))
    return out


def check_power_budget(budget_w: float, pools: list[PoolSpec]) -> None:
    """Refuse a budget below the idle power of every pool's replica: capping slows the clock
    but cannot take a GPU below idle, so no replica could ever run within it."""
    floors = {p.name: p.num_gpus * p.gpu.idle_power_w for p in pools if p.gpu is not None}
    if floors and budget_w < min(floors.values()):
        name = min(floors, key=floors.__getitem__)
        raise ConfigError(
            f"cluster.operations.power.budget_w ({budget_w:g} W) is below the idle power of "
            f"one replica of any pool (pool {name!r}: {floors[name]:,.0f} W idle); capping "
            f"cannot go below idle, so no replica can run within it"
        )


def interval_energy(
    pool: PoolSpec, held: float, busy: float, flops: float, nbytes: float, coef: PowerCoefficients
) -> tuple[float, float]:
    """Energy (J) of a replica of ``pool`` held ``held`` seconds of an interval, ``busy`` of
    them stepping through ``flops`` and ``nbytes``: at its clock, and the same work at the
    full clock (what a power cap saves)."""
    if pool.gpu is None or held <= 0:
        return 0.0, 0.0
    clock = pool.perf.clock if isinstance(pool.perf, Clocked) else 1.0
    e = pool.num_gpus * (
        busy_energy_j(pool.gpu, busy, flops, nbytes, coef, clock=clock)
        + pool.gpu.idle_power_w * (held - busy)
    )
    if not (clock < 1.0 and isinstance(pool.perf, ClockedPerf)):
        return e, e
    # At the full clock the compute-bound part of each step takes clock x its time
    # (ClockedPerf): flops / peak x (1 / clock - 1) seconds less in all.
    busy1 = busy - flops / pool.perf.peak_flops * (1 / clock - 1)
    busy1 = busy1 if busy1 > 0 else busy * clock
    e1 = pool.num_gpus * (
        busy_energy_j(pool.gpu, busy1, flops, nbytes, coef) + pool.gpu.idle_power_w * (held - busy1)
    )
    return e, e1


def next_cap_level(
    pw: PowerCapConfig,
    level: int,
    power_w: float,
    uncapped_w: dict[str, float],
    pool_power_w: dict[str, float],
) -> int:
    """The capper's level after an interval at ``level`` (0 none, 1 the low-priority pools
    capped, 2 every pool) that drew ``power_w`` over the row (``pool_power_w`` per pool,
    ``uncapped_w`` the same work at the full clock)."""
    frac = power_w / pw.budget_w
    before = level
    if frac > pw.cap_all_at:
        level = 2
    elif frac > pw.cap_low_at:
        level = max(level, 1)
    if level == before and level > 0:
        # Lift one level an interval, when the power the row would draw with it lifted (the
        # last interval's work at the full clock, ``Operations._account``) is the band below
        # its threshold: judged on the capped power, the cap would come off at every peak
        # interval and go on again at the next.
        low = set(pw.low_priority_pools)
        lifted = (
            sum(uncapped_w[n] if (level == 1 or n not in low) else pool_power_w[n] for n in uncapped_w)
            / pw.budget_w
        )
        if lifted < (pw.cap_all_at if level == 2 else pw.cap_low_at) - pw.hysteresis:
            level -= 1
    return level
