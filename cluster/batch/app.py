"""Where a batch job's rows run: the Ray cluster and the specserve application on it.

The job uses the pools of the running application `<app>` (what `specserve serve` and the
RayService deploy) when there is one: no second copy of the engines next to a live service, and the
online router and the job see each other's pressure on the same StatsBoard. Without one it deploys
the same application from the config as `<app>-batch` and deletes it when the job ends (a batch-only
cluster, e.g. the RayJob's); a re-submitted job reuses an `<app>-batch` a killed job left behind,
and deletes it in turn. The name says who owns it, so nothing else needs to remember.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import time

import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from core import Route, SpecserveConfig, use_ray_node_env
from core.ray_private import QUEUE_LEN_PROBE, LongPollClient, SingletonThreadRouter
from deployments.app import build_app_from_config
from deployments.cores import node_cores

# Set by Ray in the environment of a `ray job submit` driver.
JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
RETRY_PERIOD_S = 5.0  # between probes of a head that is not up, and each probe's timeout


class ClusterUnavailable(RuntimeError):
    """The Ray head or the application did not become usable in time."""


def in_ray_job() -> bool:
    return JOB_ENV in os.environ


def connect_ray(address: str | None, cfg: SpecserveConfig, wait_s: float, log) -> None:
    """Connects to the Ray cluster, waiting while its head is not up yet.

    Args:
        address: Ray address; None: the job's cluster under `ray job submit`, `$RAY_ADDRESS`,
            else a new local Ray of one logical CPU per core (as `specserve serve` starts).
        wait_s: how long to wait for an unreachable head.
        log: progress printer.

    Raises:
        ClusterUnavailable: still unreachable after `wait_s`.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    if not address and not in_ray_job():
        use_ray_node_env()  # a dead replica's engine processes die with it, as under `serve`
        ray.init(num_cpus=node_cores(), include_dashboard=False, log_to_driver=False)
        return
    host, _, port = (address or "").rpartition(":")
    if host and port.isdigit():
        # `ray.init` to a head that is not up blocks for minutes: probe its GCS port first.
        wait_for_port(host, int(port), wait_s, log)
    ray.init(address=address, log_to_driver=False)


def wait_for_port(host: str, port: int, wait_s: float, log) -> None:
    """Returns once `host:port` accepts a TCP connection.

    Raises:
        ClusterUnavailable: not within `wait_s`.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection((host, port), timeout=RETRY_PERIOD_S).close()
            return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise ClusterUnavailable(f"Ray head at {host}:{port} not reachable after "
                                         f"{wait_s:.0f} s (--wait-s): {e}") from None
            log(f"Ray head at {host}:{port} is not reachable yet ({e}); retrying every "
                f"{RETRY_PERIOD_S:.0f} s for up to {wait_s:.0f} s (--wait-s)")
            time.sleep(RETRY_PERIOD_S)


def open_app(cfg: SpecserveConfig, app: str, wait_s: float, log
             ) -> tuple[str, dict[Route, DeploymentHandle], bool]:
    """The application the rows go to, waiting while it deploys; deploys `<app>-batch` if none.

    Returns:
        (application name, streaming handle of each pool it runs, whether the job owns it).

    Raises:
        ClusterUnavailable: it failed to deploy, or is not running after `wait_s`.
    """
    deadline = time.monotonic() + wait_s
    owned_name = f"{app}-batch"
    logged_at = 0.0
    while True:
        apps = serve.status().applications
        name = next((n for n in (app, owned_name) if n in apps), None)
        if name is None:
            log(f"no application {app!r} on the cluster: deploying {owned_name!r} from the config "
                "(about a minute on 2 CPU cores); it is deleted when the job ends")
            serve.start(http_options={"host": cfg.server.host, "port": cfg.server.port})
            t0 = time.monotonic()
            try:
                serve.run(build_app_from_config(cfg), name=owned_name, route_prefix="/")
            except RuntimeError as e:  # Serve's "Deploying application ... failed"
                raise ClusterUnavailable(f"application {owned_name!r} failed to deploy: {e}"
                                         ) from None
            log(f"application {owned_name!r} running after {time.monotonic() - t0:.0f} s")
            return owned_name, _pool_handles(owned_name), True
        status = apps[name]
        if status.status == "RUNNING":
            log(f"using the running application {name!r}")
            return name, _pool_handles(name), name == owned_name
        if status.status == "DEPLOY_FAILED":
            raise ClusterUnavailable(f"application {name!r} failed to deploy: {status.message}")
        if time.monotonic() >= deadline:
            raise ClusterUnavailable(f"application {name!r} still {status.status} after "
                                     f"{wait_s:.0f} s (--wait-s): {status.message}")
        if time.monotonic() - logged_at >= 30:
            log(f"waiting for application {name!r} ({status.status}) to be running")
            logged_at = time.monotonic()
        time.sleep(2)


def _pool_handles(app: str) -> dict[Route, DeploymentHandle]:
    """Streaming handles of the pools ("vanilla", "speculative") the application runs."""
    deployments = serve.status().applications[app].deployments
    return {pool: serve.get_deployment_handle(pool, app).options(stream=True)
            for pool in ("vanilla", "speculative") if pool in deployments}


# Serve's handle probes a replica's queue length before sending it a request (QUEUE_LEN_PROBE); a
# probe orphaned by a cancelled row still runs on Serve's router loop, and `ray.shutdown()` under it
# makes its `ray.cancel` auto-connect to a Ray that is gone and log a traceback. The routers'
# long-poll clients do the same when an update reaches them after `ray.shutdown()` (the next
# `listen_for_change.remote`): `handle.shutdown()` leaves the one the handles share running
# (ray 2.60, SharedRouterLongPollClient), so they are stopped here too (CI run of 2026-12-05).
PROBES_WAIT_S = 2.0  # above Serve's largest probe deadline (1 s by default)


def _stop_long_poll_clients() -> None:
    """Stops every Serve long-poll client in this process (the routers' and the shared one), for
    good: call once, at exit. Run on the router loop, so none is between its `is_running` check
    and its next poll."""
    for obj in gc.get_objects():
        if isinstance(obj, LongPollClient):
            obj.stop()


def settle_handles(handles: dict[Route, DeploymentHandle], wait_s: float = PROBES_WAIT_S) -> None:
    """Shuts the pools' handles down, waits, at most `wait_s` seconds, for the queue-length
    probes still running on Serve's router loop, and stops the routers' long-poll clients, so
    that `ray.shutdown()` leaves nothing on that loop that would reconnect to Ray. Call it after
    the last request and before `ray.shutdown()`; the handles serve no request after it."""
    for handle in handles.values():
        handle.shutdown()
    loop = SingletonThreadRouter._asyncio_loop
    if loop is None or not loop.is_running():
        return

    async def settle() -> None:
        probes = [t for t in asyncio.all_tasks()
                  if getattr(t.get_coro(), "__qualname__", "") == QUEUE_LEN_PROBE]
        if probes:
            await asyncio.wait(probes, timeout=wait_s)
        _stop_long_poll_clients()

    try:
        asyncio.run_coroutine_threadsafe(settle(), loop).result(wait_s + 2.0)
    except (TimeoutError, RuntimeError):  # probes past their deadline, or the loop stopped
        pass


def close_app(name: str, log) -> None:
    """Deletes an application the job owns (its engines stop with it)."""
    log(f"deleting application {name!r}")
    serve.delete(name)
