"""``servesim serve SCENARIO``: resolve the scenario, bind the port, run the server.

The scenario's deployment is resolved by ``servesim.deployment.resolve_deployments`` (one
pool per pool of ``deployment.as_cluster``: a plain scenario's is one replica) into the cluster's pools
(``servesim.cluster.pools.pool_spec``); its workload section is not read (the clients are
the workload). The live status (requests done, running, waiting, KV usage) is shown on a
terminal unless ``--no-progress``.
"""

from __future__ import annotations

import contextlib
import errno
import math
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from servesim.cluster.pools import pool_spec
from servesim.config import Scenario, load_scenario
from servesim.config.vllm_version import version_notice
from servesim.deployment import as_cluster, resolve_deployments
from servesim.errors import ConfigError, ServesimError, naming_file
from servesim.serve.app import bind, build_app, log
from servesim.serve.driver import LiveSim
from servesim.serve.protocol import Tokenizer


def live_sim(sc: Scenario, speed: float = 1.0) -> LiveSim:
    """The live simulation of scenario ``sc``'s deployment (its workload is not read)."""
    if not (speed > 0 and math.isfinite(speed)):
        raise ServesimError(f"--speed: expected a finite number > 0, got {speed}")
    if sc.cluster is not None and sc.cluster.migration.enabled:
        raise ConfigError(
            "cluster.migration.enabled: live migration is not served (its watcher "
            "runs only while events are pending); set it to false, or use servesim simulate"
        )
    deps = resolve_deployments(sc)
    served = list(dict.fromkeys(d.served_model for d in deps))
    if len(served) > 1:  # the API answers to one model name (build_app's served model)
        raise ConfigError(
            f"cluster.pools: the pools serve {len(served)} models ({', '.join(served)}); servesim serve "
            "answers to one model (a gateway in front of one server per model is not served): serve "
            "each model's pools from a scenario of their own, or use servesim simulate"
        )
    lora = [d.name for d in deps if d.engine.lora.enabled]
    if lora:  # requests cannot name an adapter
        configs = {p.name: p for p in (sc.cluster.pools if sc.cluster is not None else [])}
        own = [n for n in lora if n in configs and configs[n].engine is not None]
        field = f"cluster.pools[{own[0]}].engine.lora.enabled" if own else "engine.lora.enabled"
        raise ConfigError(
            f"{field}: LoRA adapters are not served (a request cannot name one, and /v1/models "
            "lists none); set it to false to serve the base model, or use servesim simulate with "
            "a trace whose adapter column names each request's adapter"
        )
    pools = [pool_spec(d, reference=True) for d in deps]
    sim = LiveSim(pools, as_cluster(sc), speed=speed, seed=sc.run.seed)
    sim.vocab_size = min(d.model.vocab_size for d in deps)
    return sim


def make_server(
    sc: Scenario, host: str = "127.0.0.1", port: int = 8000, speed: float = 1.0, *, quiet: bool = False
) -> tuple[uvicorn.Server, socket.socket, LiveSim]:
    """The server of ``sc`` on a socket bound to ``host:port`` (0: a free port), not started."""
    if not 0 <= port <= 65535:
        raise ServesimError(f"--port {port}: expected a port from 0 to 65535 (0: any free port)")
    sim = live_sim(sc, speed)
    try:
        sock = bind(host, port)
    except socket.gaierror as err:
        raise ServesimError(f"--host {host}: not an address of this machine ({err.strerror})") from None
    except OSError as err:
        if err.errno == errno.EADDRNOTAVAIL:
            raise ServesimError(f"--host {host}: not an address of this machine ({err.strerror})") from None
        if err.errno == errno.EACCES:
            raise ServesimError(
                f"--port {port}: cannot listen on {host}:{port}: {err.strerror} (ports "
                f"below 1024 need privileges); choose a port from 1024"
            ) from None
        raise ServesimError(
            f"--port {port}: cannot listen on {host}:{port}: {err.strerror}; "
            f"choose another port or stop what listens there"
        ) from None
    tok = Tokenizer()
    bound = sock.getsockname()[1]
    model = sc.model.name

    def started() -> None:
        if not quiet:
            log(
                f"servesim serve: {model} on http://{host}:{bound} at {speed:g}x simulated speed, "
                f"{len(sim.cluster.replicas)} replica(s), prompt tokens by {tok.name}"
            )
            for version in dict.fromkeys(p.engine.version for p in sim.pools):
                if version_notice(version):  # after the start line, which clients read first
                    log(f"notice: {version_notice(version)}")

    app = build_app(sim, model, tok, on_start=started)
    # Idle keep-alive connections are kept 65 s (uvicorn's default is 5): a pooling client that
    # reuses one just as the server closes it sees a connection error.
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=65,
    )
    return uvicorn.Server(config), sock, sim


def run_serve(
    scenario_path: Path | None,
    overrides: list[str],
    host: str,
    port: int,
    speed: float,
    *,
    progress: bool = True,
) -> None:
    """Serve until interrupted (Ctrl-C)."""
    sc = load_scenario(scenario_path, overrides)
    with naming_file(None if scenario_path is None else str(scenario_path)):
        server, sock, sim = make_server(sc, host, port, speed)
    with _status(progress, sim):
        server.run(sockets=[sock])


@contextlib.contextmanager
def _status(enabled: bool, sim: LiveSim) -> Iterator[None]:
    """A live status line on a terminal's stderr, redrawn twice a second by rich's refresh
    thread (it only reads counts of the simulation)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn, Task, TimeElapsedColumn
    from rich.text import Text

    class SimColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            reps = sim.cluster.replicas
            running = sum(len(r.scheduler.running) for r in reps)
            waiting = sum(len(r.scheduler.waiting) for r in reps)
            kv = max(r.kv.usage for r in reps)
            return Text(
                f"serving: {sim.cluster.num_done} done, {running} running, {waiting} waiting, "
                f"KV {100 * kv:.0f}% (fullest replica)"
            )

    bar = Progress(
        SimColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True, refresh_per_second=2
    )
    bar.add_task("serving", total=None)
    with bar:
        yield
