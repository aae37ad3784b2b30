"""Multi-LoRA serving in vLLM V1's scheduler: the adapter limit per step and the adapter slots.

Modelled on vLLM v0.11-v0.19:

* **The limit per step** (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``): the
  adapters of the running requests scheduled in the step start the set ``scheduled_loras``;
  in the waiting pass a request whose adapter is not in the set while the set already
  holds ``max_loras`` adapters is *skipped* (taken out of the queue for this step and put
  back at its front, in order, when the pass ends), and the pass goes on with the next
  request; an admitted request adds its adapter to the set. Base-model requests are never
  skipped. So a step never has more than ``max_loras`` distinct adapters.
* **The slots** (``vllm/lora/worker_manager.py``: ``LRUCacheWorkerLoRAManager``,
  ``vllm/lora/model_manager.py``: ``LRUCacheLoRAModelManager``): before each forward pass
  the worker makes the step's adapters resident, one after the other. An adapter not among
  the ``max_cpu_loras`` in host memory is read from disk (evicting the least recently used
  one from host memory, which also frees its GPU slot); one not among the ``max_loras`` GPU
  slots is copied in (evicting the least recently used slot). Both caches are touched on
  every use. The step waits for these loads (``perf.lora.LoraCostModel`` adds them).

Simplifications: vLLM iterates the step's adapters as a set; here they are made resident in
the order their requests appear in the batch. Parallel sampling (n > 1) is not combined with
LoRA. ``assign_adapters`` gives each request its adapter: the trace's adapter column, or a
draw from ``engine.lora.popularity``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from servesim.config.lora import LoraConfig
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.policy_base import PolicyOptions, PolicyScheduler
from servesim.engine.request import Request
from servesim.engine.scheduler import SchedulerConfig, SchedulerOutput
from servesim.errors import ConfigError
from servesim.perf.lora import LoraCosts
from servesim.workload.base import Workload


@dataclass(slots=True)
class LoraTotals:
    """What a replica's adapters did over a run (``ReplicaTotals.lora``; the summary's ``lora``)."""

    buffer_bytes: float = 0.0  # GPU memory of the adapter slots (per GPU)
    num_disk_loads: int = 0  # adapters read from disk into host memory
    num_gpu_loads: int = 0  # adapters copied host -> GPU slot
    load_s: float = 0.0  # seconds steps waited for loads
    num_delayed: int = 0  # requests skipped at least once for the max_loras limit
    num_skips: int = 0  # (request, step) skips for the limit
    num_lora_tokens: int = 0  # tokens computed with an adapter
    max_loras_in_step: int = 0  # the most distinct adapters one step ran
    delayed: set[int] = field(default_factory=set)  # ids of the delayed requests

    def as_dict(self) -> dict[str, float | int]:
        return {
            "buffer_bytes": self.buffer_bytes,
            "num_disk_loads": self.num_disk_loads,
            "num_gpu_loads": self.num_gpu_loads,
            "load_s": self.load_s,
            "num_delayed": self.num_delayed,
            "num_skips": self.num_skips,
            "num_lora_tokens": self.num_lora_tokens,
            "max_loras_in_step": self.max_loras_in_step,
        }


class AdapterSlots:
    """The adapters resident on one replica: ``num_gpu_slots`` GPU slots and ``num_cpu_slots``
    in host memory, each an LRU cache (vLLM's ``LRUCacheLoRAModelManager``)."""

    def __init__(self, num_gpu_slots: int, num_cpu_slots: int) -> None:
        self.num_gpu_slots = num_gpu_slots
        self.num_cpu_slots = num_cpu_slots
        self.gpu: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.cpu: OrderedDict[int, None] = OrderedDict()

    def activate(self, adapter: int) -> tuple[bool, bool]:
        """Make ``adapter`` resident and most recently used; returns (read from disk, copied to GPU)."""
        from_disk = adapter not in self.cpu
        if from_disk:
            if len(self.cpu) + 1 > self.num_cpu_slots:
                oldest, _ = self.cpu.popitem(last=False)
                self.gpu.pop(oldest, None)  # removing a registered adapter deactivates it
            self.cpu[adapter] = None
        else:
            self.cpu.move_to_end(adapter)
        to_gpu = adapter not in self.gpu
        if to_gpu:
            if len(self.gpu) >= self.num_gpu_slots:
                self.gpu.popitem(last=False)
            self.gpu[adapter] = None
        else:
            self.gpu.move_to_end(adapter)
        return from_disk, to_gpu


def assign_adapters(lora: LoraConfig, wl: Workload) -> np.ndarray:
    """Each request's adapter id: 0 for the base model, k for the k-th of
    ``lora.adapter_list()``. From the workload's adapter column (names), else drawn: base
    model with probability ``base_fraction``, else an adapter by ``popularity`` (uniform, or
    Zipf: weight 1 / k^s for the k-th). A name this engine does not serve is 0 here: its
    requests are routed to the pools that serve it, and a name no pool serves is refused at
    start-up (``cluster.models.check_adapters``)."""
    adapters = lora.adapter_list()
    n = len(wl)
    if wl.adapter is not None:
        names: list[str] = list(wl.meta.get("adapter_names") or [])
        ids = {a.name: k for k, a in enumerate(adapters, 1)}
        table = np.array([0] + [ids.get(x, 0) for x in names], np.int64)
        return table[np.asarray(wl.adapter, np.int64) + 1]  # column -1 (base model) -> 0
    rng = np.random.default_rng(lora.seed)
    k = np.arange(1, len(adapters) + 1, dtype=np.float64)
    weights = np.ones_like(k) if lora.popularity == "uniform" else k**-lora.zipf_exponent
    out = rng.choice(len(adapters), size=n, p=weights / weights.sum()).astype(np.int64) + 1
    if lora.base_fraction > 0:
        out[rng.random(n) < lora.base_fraction] = 0
    return out


class LoraScheduler(PolicyScheduler):
    """vLLM V1's loop with the ``max_loras`` limit per step and the adapter slots (see the module)."""

    def __init__(
        self,
        cfg: SchedulerConfig,
        kv: KVCacheManager,
        opts: PolicyOptions,
        lora: LoraConfig,
        costs: LoraCosts,
        adapter_of: np.ndarray,
    ) -> None:
        super().__init__(cfg, kv, opts)
        self.max_loras = lora.max_loras
        self.costs = costs
        # 8 bytes a request (a list of Python ints would take ~36), read as plain ints
        self.adapter_of = array("q", np.asarray(adapter_of, np.int64).tobytes())
        self.slots = AdapterSlots(lora.max_loras, lora.cpu_slots)
        self.totals = LoraTotals(buffer_bytes=costs.buffer_bytes)
        self._step_loras: set[int] = set()  # vLLM's scheduled_loras
        self._lora_blocked = False  # the head of waiting was refused for the limit

    def adapter(self, req: Request) -> int:
        """``req``'s adapter id (0: the base model)."""
        return self.adapter_of[req.idx] if req.idx < len(self.adapter_of) else 0

    def _schedule_waiting(
        self, out: SchedulerOutput, budget: int, threshold: int, swapped: bool | None = None
    ) -> int:
        """The waiting pass, skipping requests whose adapter would exceed ``max_loras``."""
        self._step_loras = {a for r in out.reqs if (a := self.adapter(r))}
        skipped: list[Request] = []
        while True:
            self._lora_blocked = False
            budget = PolicyScheduler._schedule_waiting(self, out, budget, threshold, swapped)
            if not self._lora_blocked:
                break
            req = self.waiting.popleft()  # skipped for this step, as vLLM's skipped_waiting_requests
            skipped.append(req)
            t = self.totals
            t.num_skips += 1
            if req.idx not in t.delayed:
                t.delayed.add(req.idx)
                t.num_delayed += 1
        for req in reversed(skipped):
            self.waiting.appendleft(req)
        return budget

    def _may_admit(self, req: Request, swapped: bool | None) -> bool:
        if not PolicyScheduler._may_admit(self, req, swapped):
            return False
        a = self.adapter(req)
        if a and a not in self._step_loras and len(self._step_loras) >= self.max_loras:
            self._lora_blocked = True
            return False
        return True

    def _on_admitted(self, out: SchedulerOutput, req: Request) -> None:
        PolicyScheduler._on_admitted(self, out, req)
        a = self.adapter(req)
        if a:
            self._step_loras.add(a)

    def _finalize(self, out: SchedulerOutput) -> None:
        """As V1, plus the step's adapter tokens, its distinct adapters and their loads."""
        loras: list[int] = []
        tokens = 0
        for req, n in zip(out.reqs, out.num_tokens):
            a = self.adapter(req)
            if a:
                tokens += n
                if a not in loras:
                    loras.append(a)
        PolicyScheduler._finalize(self, out)
        if not loras:
            return
        st = out.stats
        t = self.totals
        st.num_lora_tokens = tokens
        st.num_loras = len(loras)
        for a in loras:
            from_disk, to_gpu = self.slots.activate(a)
            if to_gpu:
                st.lora_load_s += self.costs.load_s(a, from_disk)
                t.num_gpu_loads += 1
                t.num_disk_loads += from_disk
        t.load_s += st.lora_load_s
        t.num_lora_tokens += tokens
        if len(loras) > t.max_loras_in_step:
            t.max_loras_in_step = len(loras)


def lora_scheduler(
    cfg: SchedulerConfig,
    kv: KVCacheManager,
    opts: PolicyOptions,
    lora: LoraConfig,
    costs: LoraCosts | None,
    wl: Workload,
) -> LoraScheduler:
    """The scheduler of an ``engine.lora`` replica serving ``wl``."""
    if costs is None:
        raise ValueError("engine.lora needs the deployment's LoRA costs (perf.lora.LoraCostModel)")
    if opts.num_samples:
        raise ConfigError("engine.lora: parallel sampling (n > 1) with LoRA adapters is not modelled")
    return LoraScheduler(cfg, kv, opts, lora, costs, assign_adapters(lora, wl))
