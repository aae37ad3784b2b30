"""Who sends each request: ``Workload.tenant`` (int ids) and ``meta["tenant_names"]``.

Tenants come from a trace's ``tenant`` column (names or numbers, numbered in order of first
appearance), a mixture's clients (each client a tenant) or ``tenant_shares`` (each
request's tenant drawn independently with probability share / total).
"""

from __future__ import annotations

import numpy as np

from servesim.workload.base import Workload


def assign_shares(wl: Workload, shares: dict[str, float], seed: int) -> Workload:
    """``wl`` with each row's tenant drawn from ``shares`` (numpy ``default_rng(seed)``, row order)."""
    names = list(shares)
    p = np.array([shares[n] for n in names], np.float64)
    rng = np.random.default_rng(seed)
    wl.tenant = rng.choice(len(names), size=len(wl), p=p / p.sum()).astype(np.int64)
    wl.meta["tenant_names"] = names
    return wl


def tenant_names(wl: Workload) -> list[str]:
    """The names of ``wl``'s tenants by id ([] when it has none)."""
    if wl.tenant is None:
        return []
    names = wl.meta.get("tenant_names")
    if names:
        return list(names)
    return [str(i) for i in range(int(wl.tenant.max(initial=-1)) + 1)]
