"""KV offload tiers below the GPU's prefix cache: vLLM's native CPU offloading and LMCache.

**vLLM native** (``--kv-offloading-size GiB``, ``--kv-offloading-backend native``, the default
backend from vLLM 0.14, vllm-project/vllm#32421), modelled from the single-module
``OffloadingConnector`` of vLLM 0.11-0.14 (``distributed/kv_transfer/kv_connector/v1/
offloading_connector.py``, ``v1/kv_offload/cpu.py``, ``lru_manager.py``, ``arc_manager.py``;
later versions split the connector into an ``offloading/`` package and add a multi-tier
connector, not modelled here):

* The CPU tier holds ``cpu_bytes_to_use // (bytes of one offloaded block x world size)``
  blocks (``CPUOffloadingSpec``); an offloaded block is ``block_size_factor`` GPU blocks and
  is named by the hash of its last GPU block (``_get_block_hashes``).
* **Stores as blocks are computed**, not on GPU eviction: each step, every scheduled
  request's offloaded blocks completed by the step are offered to ``prepare_store``
  (``_get_reqs_to_store``), which skips blocks already stored, evicts the least recently used
  *ready, unreferenced* blocks to make room, and refuses the whole store when it cannot (the
  blocks are offered again next step). The copy is deferred to the next step's start
  ("so that offloading starts AFTER transfers related to token sampling") on the GPU->CPU
  stream, which overlaps the forward; here it starts at the end of the step that computed
  the blocks (the next step's start on a busy engine) and queues behind earlier stores.
* A stored block becomes **ready** (hittable, evictable) when its store is done *and* its
  request has finished or been preempted: ``complete_store`` runs on the request's
  ``finished_sending`` (or, for a preemption, in ``build_connector_meta``).
* **Loads are asynchronous**: at admission ``get_num_new_matched_tokens`` looks the blocks
  after the GPU prefix hit up in the CPU tier (consecutive ready blocks; at least one whole
  offloaded block), returns ``(tokens, True)``; the scheduler allocates GPU blocks for them
  (``delay_cache_blocks``), the request leaves the waiting queue's head as
  ``WAITING_FOR_REMOTE_KVS`` and is **skipped** by later steps while others run, holding
  its blocks. The CPU->GPU copy starts with the step (``start_kv_transfers``) and queues
  on its stream; the load's end is seen at the end of the first step ending after it
  (``get_finished`` after the forward), or at once on an idle engine (vLLM polls with empty
  steps). The request then has ``min(hit tokens, num_tokens - 1)`` computed tokens
  (``_update_waiting_for_remote_kv``), its blocks are cached on the GPU, and it is scheduled
  like any waiting request, in its place in the queue.
* LRU order follows ``touch``: a lookup and a store touch the request's blocks, its first
  block the most recent, so a chain's tail is evicted first.

**LMCache** (``--kv-offloading-backend lmcache``: ``LMCacheConnectorV1`` with
``lmcache.local_cpu`` and ``max_local_cpu_size = size / ranks``; LMCache's defaults in
``lmcache/v1/config.py``: ``chunk_size`` 256, ``save_decode_cache`` False,
``enable_async_loading`` False, ``cache_policy`` LRU, ``local_disk`` with
``max_local_disk_size``):

* Only **prompt** KV is stored, in whole 256-token chunks, at the end of the step that
  computed them (``wait_for_save``); the copy is synchronous, so it adds to that step.
  Each chunk goes to the CPU tier and, with a disk tier, to disk too (the storage manager
  puts to every backend), each evicting LRU.
* Loads are **synchronous**: the request is scheduled at once with the hit tokens counted
  as computed, and the step waits for the copy (CPU->GPU at the host link; a chunk found
  only on disk is first read at the disk's bandwidth).

Simplified, and said so in docs/kv_offload.md: copies run at a fixed bandwidth with no
per-copy latency and no contention with the forward's HBM traffic; a finished request's
GPU blocks are freed at once (vLLM keeps them until its stores finish); vLLM's store
threshold filter and LMCache's asynchronous loading are not modelled; disk writes are taken
as done when the chunk is stored. Eviction is LRU, or vLLM's ARC (``ARCTier``) for native
(the tiers: ``engine/kv_tiers.py``).

Used only with the step-by-step vLLM V1 scheduler and its ``KVCacheManager`` (``build.py``):
with offloading off nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servesim.config.kv_offload import KVOffloadConfig
from servesim.engine.events import EventLoop
from servesim.engine.kv_cache import KVBlock, KVCacheManager
from servesim.engine.kv_tiers import TIERS, LRUTier
from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from servesim.metrics.records import OffloadTotals


@dataclass(slots=True)
class Load:
    """A request's asynchronous load (native): its tier keys, tokens and when it is done."""

    keys: list[int]
    num_tokens: int  # computed tokens once loaded (GPU hit + loaded)
    done_s: float


class OffloadScheduler(Scheduler):
    """vLLM V1's scheduler with a KV connector to lower tiers (the module's docstring)."""

    def __init__(
        self,
        cfg: SchedulerConfig,
        kv: KVCacheManager,
        offload: KVOffloadConfig,
        loop: EventLoop,
        kv_bytes_per_block: float,
        num_gpus: int,
        totals: OffloadTotals,
    ) -> None:
        Scheduler.__init__(self, cfg, kv)
        self.gpu_kv = kv
        self.loop = loop
        self.is_async = offload.backend == "native"
        self.prompt_only = offload.backend == "lmcache"
        self.block_size = offload.tier_block_size(kv.block_size)
        self.factor = self.block_size // kv.block_size
        # bytes of one offloaded block on one GPU (each GPU copies its own shard)
        self.block_bytes = kv_bytes_per_block * self.factor
        assert offload.host_gb_per_s is not None  # build.offload_scheduler checks it
        self.host_bw = offload.host_gb_per_s * 1e9
        self.disk_bw = offload.disk_read_gb_per_s * 1e9
        whole = self.block_bytes * num_gpus  # one block on every GPU of the replica
        self.cpu = TIERS[offload.eviction_policy]("cpu", int(offload.cpu_size_gib * (1 << 30) // whole))
        self.disk = (
            LRUTier("disk", int(offload.disk_size_gib * (1 << 30) // whole))
            if offload.disk_size_gib
            else None
        )
        self.totals = totals
        totals.backend = offload.backend
        totals.block_size = self.block_size
        totals.num_cpu_blocks = self.cpu.num_blocks
        totals.num_disk_blocks = self.disk.num_blocks if self.disk is not None else 0
        self.loads: dict[int, Load] = {}
        self.next_store: dict[int, int] = {}  # request -> its next offloaded block to store
        self.stored: dict[int, list[int]] = {}  # request -> keys it stored, not yet ready
        self.store_done_s: dict[int, float] = {}  # request -> end of its last store copy
        self.unsubmitted: list[tuple[int, int]] = []  # native: (request, blocks) copied at step end
        self.d2h_free_s = 0.0  # the GPU->CPU copy stream is busy until then
        self.h2d_free_s = 0.0
        self.wake: Callable[[float], None] | None = None  # wakes an idle replica when a load ends

    # ----------------------------------------------------------------- keys

    def tier_keys(self, req: Request, start: int, end: int) -> list[int]:
        """Keys of offloaded blocks ``[start, end)``: each one's last GPU block hash."""
        f = self.factor
        hashes = req.ensure_block_hashes(end * f, self.gpu_kv.block_size)
        return hashes[start * f + f - 1 : end * f : f]

    # ----------------------------------------------------------------- schedule

    def _schedule_waiting(
        self, out: SchedulerOutput, budget: int, threshold: int, swapped: bool | None = None
    ) -> int:
        """vLLM V1's waiting pass with a connector: a request whose load is in flight is
        skipped (and keeps its place), one whose load ended resumes with its loaded tokens,
        and a new one may find tokens in a lower tier (loaded asynchronously or in the step)."""
        cfg = self.cfg
        kv = self.gpu_kv
        waiting = self.waiting
        running = self.running
        now = self.loop.now
        skipped: list[Request] = []
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            req = waiting[0]
            load = self.loads.get(req.idx)
            if load is not None:
                if load.done_s > now:
                    skipped.append(waiting.popleft())
                    continue
                self._finish_load(req, load)
            hit: list[KVBlock] = []
            num_hit = num_ext = 0
            if req.num_computed_tokens == 0:
                hit, num_hit = kv.get_computed_blocks(req)
                num_ext = self._external_hit(req, num_hit, now)
            total = req.num_prompt_tokens + req.num_output_tokens
            if num_ext and self.is_async:  # vLLM: no tokens scheduled, blocks for the load
                if (
                    kv.allocate_slots(req, num_ext, num_hit, hit, cfg.scheduler_reserve_full_isl, True)
                    is None
                ):
                    break
                waiting.popleft()
                self._start_load(req, num_hit, num_ext, now)
                skipped.append(req)
                continue
            num_computed = req.num_computed_tokens + num_hit + num_ext
            n = total - num_computed
            if 0 < threshold < n:
                n = threshold
            if not cfg.enable_chunked_prefill and n > budget:
                break
            if n > budget:
                n = budget
            if kv.allocate_slots(req, n, num_hit + num_ext, hit, cfg.scheduler_reserve_full_isl) is None:
                break
            waiting.popleft()
            running.append(req)
            req.status = ReqStatus.RUNNING
            req.num_computed_tokens = num_computed
            if req.num_cached_tokens < 0:
                self._count_lookup(req, num_hit, num_ext)
            if num_ext:  # loaded in the step; LMCache does not store what it found again
                out.transfer_s += self._sync_load(req, num_hit, num_ext, now)
                self.next_store[req.idx] = (num_hit + num_ext) // self.block_size
            out.reqs.append(req)
            out.num_tokens.append(n)
            budget -= n
        for r in reversed(skipped):
            waiting.appendleft(r)
        return budget

    def _external_hit(self, req: Request, num_hit: int, now: float) -> int:
        """Tokens after the GPU hit found in lower tiers (vLLM ``get_num_new_matched_tokens``:
        whole offloaded blocks, at least one; at most num_tokens - 1 computed afterwards for
        LMCache, which recomputes the last token; native rounds that at the load's end)."""
        bs = self.block_size
        num_tokens = req.num_prompt_tokens + req.num_output_tokens
        num_blocks = (req.num_prompt_tokens if self.prompt_only else num_tokens) // bs
        start = num_hit // bs
        if num_blocks <= start:
            return 0
        keys = self.tier_keys(req, 0, num_blocks)
        self.cpu.touch(keys, now)
        n = self._tier_hits(keys[start:], now)
        ext = (start + n) * bs - num_hit
        if ext < bs:
            return 0
        if not self.is_async and num_hit + ext >= num_tokens:
            ext = num_tokens - 1 - num_hit
        return ext

    def _tier_hits(self, keys: list[int], now: float) -> int:
        """Consecutive blocks of ``keys`` found in the CPU tier or, failing it, on disk."""
        disk = self.disk
        n = 0
        for k in keys:
            b = self.cpu.blocks.get(k)
            if b is None or b.ready_s > now:
                b = disk.blocks.get(k) if disk is not None else None
                if b is None or b.ready_s > now:
                    break
            n += 1
        return n

    def _count_lookup(self, req: Request, num_hit: int, num_ext: int) -> None:
        """Per-tier hit statistics, once per request at its first lookup."""
        req.num_cached_tokens = num_hit + num_ext
        kv = self.gpu_kv
        kv.num_query_tokens += req.num_prompt_tokens
        kv.num_hit_tokens += num_hit
        t = self.totals
        t.num_query_tokens += req.num_prompt_tokens
        t.num_gpu_hit_tokens += num_hit
        num_disk = self._disk_tokens(req, num_hit, num_ext)
        t.num_cpu_hit_tokens += num_ext - num_disk
        t.num_disk_hit_tokens += num_disk

    def _disk_tokens(self, req: Request, num_hit: int, num_ext: int) -> int:
        """Of ``num_ext`` tokens after the GPU hit, those in blocks found only on disk."""
        if self.disk is None or not num_ext:
            return 0
        bs = self.block_size
        start, end = num_hit // bs, -(-(num_hit + num_ext) // bs)
        keys = self.tier_keys(req, start, end)
        cpu = self.cpu.blocks
        n = 0
        for i, k in enumerate(keys):
            if k not in cpu:
                lo = max((start + i) * bs, num_hit)
                n += min((start + i + 1) * bs, num_hit + num_ext) - lo
        return n

    # ----------------------------------------------------------------- loads

    def _start_load(self, req: Request, num_hit: int, num_ext: int, now: float) -> None:
        """native: the CPU->GPU copy of ``num_ext`` tokens starts with this step (``start_kv_transfers``)."""
        bs = self.block_size
        keys = self.tier_keys(req, num_hit // bs, (num_hit + num_ext) // bs)
        self.cpu.add_ref(keys, 1)
        if req.num_cached_tokens < 0:
            self._count_lookup(req, num_hit, num_ext)
        copy_s = len(keys) * self.block_bytes / self.host_bw
        start = max(now, self.h2d_free_s)
        done = start + copy_s
        self.h2d_free_s = done
        self.loads[req.idx] = Load(keys, num_hit + num_ext, done)
        self.next_store[req.idx] = (num_hit + num_ext) // bs  # update_state_after_alloc
        t = self.totals
        t.num_loads += 1
        t.load_bytes += len(keys) * self.block_bytes
        t.load_s += copy_s
        t.load_wait_s += done - now
        if self.wake is not None:
            self.wake(done)

    def _finish_load(self, req: Request, load: Load) -> None:
        """native: the load ended (``_update_waiting_for_remote_kv``): the blocks are cached on the
        GPU and the request has the loaded tokens but the last computed."""
        del self.loads[req.idx]
        self.cpu.add_ref(load.keys, -1)
        self.gpu_kv.cache_blocks(req, load.num_tokens)
        num_tokens = req.num_prompt_tokens + req.num_output_tokens
        req.num_computed_tokens = min(load.num_tokens, num_tokens - 1)

    def _sync_load(self, req: Request, num_hit: int, num_ext: int, now: float) -> float:
        """lmcache: seconds the step waits to copy ``num_ext`` tokens in (disk reads first)."""
        bs = self.block_size
        num_disk = self._disk_tokens(req, num_hit, num_ext)
        keys = self.tier_keys(req, num_hit // bs, -(-(num_hit + num_ext) // bs))
        self.cpu.touch(keys, now)
        if self.disk is not None:
            self.disk.touch(keys, now)
        per_token = self.block_bytes / bs
        nbytes = num_ext * per_token
        copy_s = nbytes / self.host_bw + num_disk * per_token / self.disk_bw
        t = self.totals
        t.num_loads += 1
        t.load_bytes += nbytes
        t.load_s += copy_s
        t.step_transfer_s += copy_s
        return copy_s

    # ----------------------------------------------------------------- stores

    def _finalize(self, out: SchedulerOutput) -> None:
        Scheduler._finalize(self, out)
        now = self.loop.now
        for req in out.reqs:
            self._offer_store(req, out, now)
        for victim in out.preempted:  # vLLM completes a preempted request's stores
            self._complete_stores(victim, now)

    def _offer_store(self, req: Request, out: SchedulerOutput, now: float) -> None:
        """The request's offloaded blocks completed by this step go to ``prepare_store``."""
        bs = self.block_size
        upto = req.num_computed_tokens
        if self.prompt_only:
            upto = min(upto, req.num_prompt_tokens)
        num_blocks = upto // bs
        start = self.next_store.get(req.idx, 0)
        if num_blocks <= start:
            return
        keys = self.tier_keys(req, start, num_blocks)
        new = self.cpu.prepare_store(keys, now)
        if new is None:
            self.totals.num_store_skips += 1
            return
        self.next_store[req.idx] = num_blocks
        t = self.totals
        t.num_cpu_evictions = self.cpu.num_evictions
        if not new:
            return
        self.cpu.touch(self.tier_keys(req, 0, num_blocks), now)  # vLLM touches only when it stores
        nbytes = len(new) * self.block_bytes
        copy_s = nbytes / self.host_bw
        t.num_stored_blocks += len(new)
        t.store_bytes += nbytes
        t.store_s += copy_s
        self.stored.setdefault(req.idx, []).extend(new)
        if self.is_async:
            self.unsubmitted.append((req.idx, len(new)))
        else:  # lmcache: a synchronous copy at the end of this step's forward
            out.transfer_s += copy_s
            t.step_transfer_s += copy_s
            if self.disk is not None:
                stored = self.disk.prepare_store(new, now)
                t.num_disk_evictions = self.disk.num_evictions
                if stored is not None:
                    self.disk.mark_ready(stored, now)

    def update_from_output(self, out: SchedulerOutput, now: float) -> tuple[list[Request], list[Request]]:
        """The step ended: its stores start (native) or are done (lmcache); finished requests'
        stored blocks become ready once their copies end."""
        produced, finished = Scheduler.update_from_output(self, out, now)
        for idx, num_blocks in self.unsubmitted:
            start = now if now > self.d2h_free_s else self.d2h_free_s
            self.d2h_free_s = start + num_blocks * self.block_bytes / self.host_bw
            self.store_done_s[idx] = self.d2h_free_s
        self.unsubmitted.clear()
        if not self.is_async:
            for req in out.reqs:
                self._complete_stores(req, now)
        for req in finished:
            self._complete_stores(req, now)
            self.next_store.pop(req.idx, None)
        return produced, finished

    def _complete_stores(self, req: Request, now: float) -> None:
        keys = self.stored.pop(req.idx, None)
        done = self.store_done_s.pop(req.idx, now)
        if keys:
            self.cpu.mark_ready(keys, done if done > now else now)

    def abort_request(self, req: Request) -> bool:
        load = self.loads.pop(req.idx, None)
        if load is not None:
            self.cpu.add_ref(load.keys, -1)
        if not Scheduler.abort_request(self, req):
            return False
        self._complete_stores(req, self.loop.now)
        self.next_store.pop(req.idx, None)
        return True

    def check_invariants(self) -> None:
        """GPU blocks as the base checks; every lower-tier block count within its capacity and
        every block read by a load still stored."""
        Scheduler.check_invariants(self)
        for tier in (self.cpu, self.disk):
            if tier is not None:
                assert len(tier.blocks) <= tier.num_blocks, f"{tier.name}: {len(tier.blocks)} blocks"
        refs: dict[int, int] = {}
        for load in self.loads.values():
            for k in load.keys:
                refs[k] = refs.get(k, 0) + 1
        for k, b in self.cpu.blocks.items():
            assert b.ref_cnt == refs.get(k, 0), f"cpu block {k}: ref {b.ref_cnt}, loads {refs.get(k, 0)}"
