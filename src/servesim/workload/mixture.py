"""Client mixtures (ServeGen-style): a workload as the sum of clients, each with its own
arrival process (rate profile, Gamma/Weibull burstiness) and length distributions.

Each client is a synthetic workload of its own (``generate_synthetic``) drawn from its own
child seed, so adding a client leaves the others' requests unchanged; the streams are
merged by arrival time. With ``num_requests`` the merged stream is cut to its first N:
every client is generated over a horizon long enough to hold them (doubled until it does).
"""

from __future__ import annotations

import numpy as np

from servesim.config import ClientConfig, MixtureWorkload, SyntheticWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import Workload
from servesim.workload.limits import check_memory
from servesim.workload.synthetic import generate_synthetic


def generate_mixture(cfg: MixtureWorkload, seed: int = 0) -> Workload:
    """The merged requests of ``cfg``'s clients; ``meta["client"]`` is each row's client index,
    and each client is a tenant (``Workload.tenant``, named in ``meta["tenant_names"]``)."""
    total_seed = cfg.seed + seed
    if total_seed < 0:
        raise WorkloadError(
            f"workload.seed ({cfg.seed}) + run.seed ({seed}) = {total_seed}: expected a seed >= 0"
        )
    seeds = [
        int(s.generate_state(1)[0] >> 1) for s in np.random.SeedSequence(total_seed).spawn(len(cfg.clients))
    ]
    if cfg.num_requests is not None:
        check_memory(cfg.num_requests, f"num_requests={cfg.num_requests:,}")
    horizon = cfg.duration_s
    if horizon is None:
        assert cfg.num_requests is not None
        horizon = 1.2 * cfg.num_requests / sum(c.arrival.rate for c in cfg.clients)
    for _ in range(40):
        parts = [_client(c, horizon, s) for c, s in zip(cfg.clients, seeds, strict=True)]
        total = sum(len(p) for p in parts if p is not None)  # None: a client quiet so far
        if cfg.duration_s is not None or total >= (cfg.num_requests or 0):
            break
        horizon *= 2.0
    else:
        raise WorkloadError("workload: the clients' rate profiles give too few requests; give duration_s")
    wl = _merge(parts, cfg)
    if cfg.num_requests is not None and len(wl) > cfg.num_requests:
        wl = wl.subset(slice(0, cfg.num_requests))
        wl.meta["client"] = wl.meta["client"][: cfg.num_requests]
    if len(wl) == 0:
        raise WorkloadError(f"workload: no arrival before duration_s={cfg.duration_s}")
    wl.tenant = np.asarray(wl.meta["client"], np.int64)
    wl.meta["tenant_names"] = [c.name for c in cfg.clients]
    names = list(dict.fromkeys(c.model for c in cfg.clients if c.model is not None))
    if names:  # each client's requests name its model (-1: the scenario's)
        ids = np.array([names.index(c.model) if c.model is not None else -1 for c in cfg.clients], np.int64)
        wl.model = ids[wl.tenant]
        wl.meta["model_names"] = names
    wl.meta["requests_per_client"] = dict(
        zip(
            [c.name for c in cfg.clients],
            np.bincount(wl.meta["client"], minlength=len(cfg.clients)).tolist(),
            strict=True,
        )
    )
    return wl


def _client(c: ClientConfig, horizon: float, seed: int) -> Workload | None:
    syn = SyntheticWorkload(
        arrival=c.arrival,
        prompt_len=c.prompt_len,
        output_len=c.output_len,
        num_requests=None,
        duration_s=horizon,
        prefix_groups=c.prefix_groups,
        prefix_len=c.prefix_len,
        seed=seed,
    )
    try:
        return generate_synthetic(syn)
    except WorkloadError as err:
        if "no arrival before" in str(err):
            return None  # a quiet client in this window
        raise WorkloadError(f"workload.clients.{c.name}: {err}") from None


def _merge(parts: list[Workload | None], cfg: MixtureWorkload) -> Workload:
    kept = [(i, p) for i, p in enumerate(parts) if p is not None]
    if not kept:
        return Workload(
            np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), meta={"client": np.zeros(0, np.int64)}
        )
    client = np.concatenate([np.full(len(p), i, np.int64) for i, p in kept])
    arrival = np.concatenate([p.arrival_s for _, p in kept])
    # Prefix groups are per client: client i's groups are numbered after the ones before it.
    offsets = np.cumsum([0] + [cfg.clients[i].prefix_groups for i, _ in kept])[:-1]
    has_groups = any(p.prefix_group is not None for _, p in kept)
    group = None
    if has_groups:
        group = np.concatenate(
            [
                p.prefix_group + off if p.prefix_group is not None else np.full(len(p), -1)
                for (_, p), off in zip(kept, offsets, strict=True)
            ]
        ).astype(np.int64)
        lens = {cfg.clients[i].prefix_len for i, p in kept if p.prefix_group is not None}
        if len(lens) > 1:
            raise WorkloadError(
                f"workload.clients: prefix_len must be the same for every client with "
                f"prefix_groups, found {sorted(lens)}"
            )
    order = np.argsort(arrival, kind="stable")
    rates = ", ".join(f"{cfg.clients[i].name} {cfg.clients[i].arrival.rate:g}/s" for i, _ in kept)
    return Workload(
        arrival_s=arrival[order],
        num_prompt_tokens=np.concatenate([p.num_prompt_tokens for _, p in kept])[order],
        num_output_tokens=np.concatenate([p.num_output_tokens for _, p in kept])[order],
        prefix_group=None if group is None else group[order],
        prefix_len=max((cfg.clients[i].prefix_len for i, p in kept if p.prefix_group is not None), default=0),
        source=f"mixture({rates})",
        meta={
            "client": client[order],
            "clients": [c.name for c in cfg.clients],
            "notices": [n for _, p in kept for n in p.meta.get("notices", [])],
            "seed": cfg.seed,
        },
    )
