"""`build_app`: the Serve application builder that `serve run`, a Serve config file and a RayService's
`serveConfigV2` point at (`import_path: deployments.app:build_app`).

Example Serve config:

    applications:
      - name: specserve
        route_prefix: /
        import_path: deployments.app:build_app
        args:
          config_path: cluster/default.yaml     # or the config's fields inline
"""

from __future__ import annotations

from ray.serve import Application

from core import ConfigError, SpecserveConfig, load_config as core_load_config
from deployments.pools import build_pool
from router.ingress import build_ingress


def load_config(args: dict) -> SpecserveConfig:
    """`args` is `{"config_path": FILE}` or the config's fields inline.

    Raises:
        ConfigError: the config is invalid (names the field) or does not fit its local
            checkpoints (`check_checkpoints`: context, heads, vocab).
    """
    args = dict(args or {})
    path = args.pop("config_path", None)
    if path is not None and args:
        raise ValueError(f"args: give config_path or inline fields, not both (got {sorted(args)})")
    return core_load_config(path, inline=args)


def build_app(args: dict) -> Application:
    """The specserve application: ingress deployment over the configured pools.

    With `autoscaling.enabled` the pools are autoscaled deployments: deploy the application with
    its `autoscaling_policy` set (`deployments.deploy`, the rendered RayService), since Ray Serve
    takes an application-level policy only from a declarative config.
    """
    cfg = load_config(args)
    return build_app_from_config(cfg, autoscale=cfg.autoscaling.enabled)


def build_app_from_config(cfg: SpecserveConfig, autoscale: bool = False) -> Application:
    """Binds the pools with a replica or more and the ingress in front of them
    (`router.ingress.build_ingress`).

    Each call is one build of the application, named by a fresh `generation` in the ingress's
    arguments: Serve builds once per deploy (`serve run`, `serve deploy` of a changed config, a
    RayService update) and keeps the arguments across replica and controller restarts, so the
    runtime pin (router/board.py) lives exactly as long as the deployed application.

    Args:
        autoscale: give each pool Serve autoscaling bounds from `cfg.autoscaling` (for
            `deployments.deploy`); False: each pool starts `cfg.initial_replicas(pool)`, fixed.

    Raises:
        ConfigError: on a one-node Ray cluster, the CPU pools' starting replicas need more
            logical CPUs than the node has (`check_fits_node`).
    """
    check_fits_node(cfg)
    pools = {name: build_pool(name, cfg.model, getattr(cfg, name),
                              pool_deployment_config(cfg, name, autoscale),
                              {"utilization_source": cfg.autoscaling.utilization_source,
                               "dcgm_exporter_url": cfg.autoscaling.dcgm_exporter_url},
                              cfg.capture)
             for name in cfg.pools()}
    return build_ingress(cfg, pools)


def check_fits_node(cfg: SpecserveConfig) -> None:
    """Refuses, at build time, replicas a one-node Ray cannot place: node labels it lacks
    (`<pool>.node_labels`, `server.node_labels`), or CPU pools' starting replicas beyond its CPUs.

    A CPU replica takes one logical CPU per tensor-parallel rank: the cores it owns
    (deployments/cores.py). Where Ray runs on one node (`serve run` on a local Ray, `specserve
    serve`), a replica beyond its CPUs would wait unscheduled forever while the application
    reports the pool; a cluster of several nodes (KubeRay, autoscaled) is not judged here, since
    its workers may join later. No check without a running Ray.

    Raises:
        ConfigError: names the field: the labels missing, or the pools' replicas, the CPUs
            they need and the node's.
    """
    import ray

    if not ray.is_initialized():
        return
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) != 1:
        return
    labels = nodes[0].get("Labels") or {}
    selectors = {f"{p}.node_labels": getattr(cfg, p).node_labels
                 for p in cfg.pools() if cfg.initial_replicas(p)}
    selectors["server.node_labels"] = cfg.server.node_labels
    for field, wanted in selectors.items():
        if not wanted.items() <= labels.items():
            missing = ",".join(f"{k}={v}" for k, v in wanted.items() if labels.get(k) != v)
            raise ConfigError(f"{field}: this one-node Ray has no node labelled {missing}, so "
                              "those replicas would never start; start Ray with `ray start "
                              f"--labels {missing}` or clear the field")
    have = nodes[0].get("Resources", {}).get("CPU", 0)
    wants = {p: cfg.initial_replicas(p) * getattr(cfg, p).tensor_parallel_size
             for p in cfg.pools() if getattr(cfg, p).accelerator == "cpu"}
    if sum(wants.values()) > have:
        detail = ", ".join(f"{p}: {cfg.initial_replicas(p)} x tensor_parallel_size "
                           f"{getattr(cfg, p).tensor_parallel_size}" for p in wants)
        raise ConfigError(
            f"{'/'.join(wants)}.num_replicas: the CPU pools start with {sum(wants.values())} "
            f"replica core(s) ({detail}; with autoscaling, its initial_replicas) but this Ray node "
            f"has {have:g} CPU(s); each CPU replica owns one core per tensor-parallel rank. "
            "Start fewer replicas, or Ray with more CPUs on a machine that has the cores "
            "(`ray start --num-cpus N`)")


def pool_deployment_config(cfg: SpecserveConfig, pool: str, autoscale: bool) -> dict:
    """Serve deployment options of one pool: fixed replicas, or autoscaling bounds.

    Autoscaled, Serve's own delays are 0: the policy (autoscaling/rules.py) keeps the
    configured delays itself, so that each decision and its wait are visible with their reason.
    """
    if not autoscale:
        return {"num_replicas": cfg.initial_replicas(pool)}
    scaling, bounds = cfg.autoscaling, cfg.autoscaling.pool(pool)
    return {"autoscaling_config": {
        "min_replicas": bounds.min_replicas, "max_replicas": bounds.max_replicas,
        "initial_replicas": bounds.start_replicas, "upscale_delay_s": 0, "downscale_delay_s": 0,
        "target_ongoing_requests": scaling.target_ongoing_requests,
        "metrics_interval_s": scaling.metrics_interval_s,
        "look_back_period_s": scaling.look_back_period_s}}
