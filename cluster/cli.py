"""`specserve`: the command line.

    specserve serve [--config FILE]      local Ray + the Serve app on the config's host:port
    specserve validate [--config FILE]   check a config (names the failing field), print it resolved
    specserve models build [...]         the model lab: target, draft, then EAGLE-3/Medusa heads
    specserve models heads|report [...]  heads only (models/heads.py); speculators report via vLLM
    specserve models widen [--k 32]      the weight-bound target, same function (models/widen.py)
    specserve models quantize-draft      the lab's draft as an INT8 W8A8 compressed-tensors
                                         checkpoint, draft-int8 (models/quantize.py)
    specserve render [...]               KubeRay manifests from a config (cluster/kube/cli.py)
    specserve cluster VERB [...]         apply / status / scale / upgrade / submit-batch / delete
    specserve batch --input F --output F offline generation over an OpenAI Batch API file
                                         (cluster/batch/job.py; also under `ray job submit`)
    specserve observability png --prometheus URL --out DIR
                                         the dashboard's main panels as PNGs (cluster/observability)
    specserve image build [--engine cpu|gpu] [--tool T] [--base IMAGE] [--repository REPO]
                                         the container image (cluster/image.py, manifests/image/)
    specserve speculator retrain --config FILE [...]
                                         the EAGLE-3 head trained on captured traffic, gated by
                                         vLLM's acceptance, as a new version (models/retrain.py)
    specserve speculator rollout --config FILE --candidate DIR
                                         the candidate on one speculative replica (canary), then
                                         rolled forward or back on live acceptance
                                         (deployments/rollout.py)
    specserve speculator loop --config FILE [--once]
                                         retrain + rollout on the config's trigger: manual,
                                         drift, schedule (cluster/speculator_loop.py)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from cluster.kube import cli as kube_cli
from cluster.engine_reaper import engine_processes, reap
from cluster.image import main as image_main
from cluster.ports import taken_ports
from core import DEFAULT_CONFIG_PATH, ConfigError, load_config, use_ray_node_env

APP_NAME = "specserve"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _cmd_validate(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    from deployments.engine_args import check_engine_kwargs  # imports vLLM: names and bounds

    for pool in (cfg.vanilla, cfg.speculative):
        check_engine_kwargs(pool)
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    import ray
    from ray import serve

    from deployments.cores import node_cores
    from deployments.deploy import run_app

    # A local node declares one logical CPU per core: a CPU replica takes one per
    # tensor-parallel rank (the cores it owns, deployments/cores.py), the ingress none.
    if not args.address:
        use_ray_node_env(cfg.server.port)
        taken = taken_ports(local_ports(cfg.server.host, cfg.server.port))
        if taken:
            held = any(" is held by " in line for line in taken)
            print("specserve: " + "; ".join(taken) + (
                ". An haproxy or Ray left by a run that was killed keeps its ports (`ss -ltnp`): "
                "stop it, or set server.port in the config." if held else
                ". Set server.host and server.port in the config to an address of this "
                "machine that you may bind."), file=sys.stderr)
            return 2
    ray.init(address=args.address, num_cpus=None if args.address else node_cores(),
             include_dashboard=False)
    serve.start(http_options={"host": cfg.server.host, "port": cfg.server.port})
    t0 = time.monotonic()
    run_app(cfg, APP_NAME)
    base = f"http://{cfg.server.host}:{cfg.server.port}"
    print(f"specserve ready in {time.monotonic() - t0:.0f} s at {base}  (Ctrl-C stops it)\n"
          f"  curl -si {base}/v1/completions -H 'Content-Type: application/json' -d "
          f"'{{\"model\": \"{cfg.model.served_model_name}\", \"prompt\": \"def fibonacci(n):\", "
          f"\"max_tokens\": 64, \"temperature\": 0}}'\n"
          f"  # force a path with \"route\": \"speculative\" | \"vanilla\" (default \"auto\")\n"
          f"  curl -s {base}/metrics | grep -E 'specserve_(spec_decode|requests)'", flush=True)
    if args.no_block:
        return 0
    # SIGTERM (e.g. `timeout`, a process manager) shuts down like Ctrl-C: Serve stops the replicas
    # gracefully so their vLLM engine processes exit with them. SIGINT too, explicitly: a shell
    # starts a background job (`nohup specserve serve &`) with SIGINT ignored, and Python then
    # installs no handler of its own, so `kill -INT` would do nothing.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        # A second signal (Ctrl-C twice, `timeout -k`) must not cut the shutdown short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("specserve: shutting down", flush=True)
        engines = engine_processes(os.getpid()) if not args.address else []
        serve.shutdown()
        ray.shutdown()
        killed = reap(engines)
        if killed:
            print(f"specserve: {len(killed)} vLLM engine processes outlived their replicas; "
                  f"killed {killed}", file=sys.stderr, flush=True)
    return 0


def local_ports(host: str, port: int) -> dict[str, tuple[str, int]]:
    """The TCP ports a local `specserve serve` listens on: Serve's HTTP port (`server.port`) and,
    under the HAProxy frontend, HAProxy's stats and metrics ports (`core.haproxy_ports_env`; read
    from this process's environment, as the raylet reads them)."""
    ports = {"server.port": (host, port)}
    if os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1":
        for name in ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT"):
            if os.environ.get(name, "").isdigit():
                ports[name] = ("0.0.0.0", int(os.environ[name]))  # HAProxy binds every interface
    return ports


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, unless its help already names one or it has none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default" in (action.help or "") or action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _models_parser() -> argparse.ArgumentParser:
    """`specserve models`: each action's flags and defaults are the lab entrypoint's own."""
    from models import build, heads, quantize, speculators_report, widen

    p = argparse.ArgumentParser(prog="specserve models", description="The model lab.")
    actions = p.add_subparsers(dest="action", required=True)
    for name, module, helptext in (
            ("build", build, "target + draft (models.build, these flags), then the speculator "
             "heads (models.heads, its defaults)"),
            ("heads", heads, "the speculator heads only (models.heads)"),
            ("report", speculators_report, "the speculators report through vLLM "
             "(models.speculators_report)"),
            ("widen", widen, "the weight-bound target: the trained one with each MLP unit copied "
             "k times, the same function (models.widen)"),
            ("quantize-draft", quantize, "the lab's draft as an INT8 W8A8 compressed-tensors "
             "checkpoint, what vLLM's CPU int8 kernel serves (models.quantize)")):
        a = actions.add_parser(name, help=helptext, description=helptext,
                               formatter_class=_DefaultsFormatter)
        module.add_arguments(a)
    return p


def _cmd_models(argv: list[str]) -> int:
    """`build`: target + draft (models.build, flags passed through), then the speculator heads
    (models.heads, defaults); `heads`: the heads only, flags passed through; `report`: the
    speculators report through vLLM (models.speculators_report); `widen`: the weight-bound target
    (models.widen); `quantize-draft`: the int8 draft (models.quantize)."""
    from models.build import main as build_main
    from models.heads import main as heads_main
    from models.quantize import main as quantize_main
    from models.speculators_report import main as report_main
    from models.widen import main as widen_main

    args = _models_parser().parse_args(argv)  # `--help` and bad flags end here
    flags = argv[argv.index(args.action) + 1:]
    if args.action == "heads":
        return heads_main(flags)
    if args.action == "report":
        return report_main(flags)
    if args.action == "widen":
        return widen_main(flags)
    if args.action == "quantize-draft":
        return quantize_main(flags)
    return build_main(flags) or heads_main([])


def _cmd_batch(args: argparse.Namespace, rest: list[str]) -> int:
    from cluster.batch import main as batch_main

    return batch_main(rest)


def _cmd_observability(args: argparse.Namespace, rest: list[str]) -> int:
    from cluster.observability.png import main as png_main

    return png_main(rest)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specserve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, helptext in (("serve", "run the application on a local (or given) Ray cluster"),
                           ("validate", "validate a config file and print it resolved")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config file")
        if name == "serve":
            s.add_argument("--address", default=None, help="Ray address (default: start local)")
            s.add_argument("--no-block", action="store_true", help="return once serving")
    sub.add_parser("models", add_help=False, help="the model lab: build, heads, report (see "
                   "`specserve models ACTION --help`)")
    sub.add_parser("render", add_help=False, help="KubeRay manifests from a config")
    sub.add_parser("cluster", add_help=False, help="operate the RayService on Kubernetes")
    sub.add_parser("batch", add_help=False, help="offline generation over an OpenAI Batch API "
                   "file (see `specserve batch --help`)")
    o = sub.add_parser("observability", add_help=False, help="the dashboard's main panels as PNGs from a "
                       "Prometheus (see `specserve observability png --help`)")
    o.add_argument("action", choices=["png"])
    sub.add_parser("image", add_help=False, help="build the container image for one engine "
                   "(see `specserve image build --help`)")
    s = sub.add_parser("speculator", add_help=False, help="the serving speculator: retrain it "
                       "on captured traffic, roll a candidate out as a canary, loop both on a "
                       "trigger (see `specserve speculator retrain|rollout|loop --help`)")
    s.add_argument("action", choices=["retrain", "rollout", "loop"])
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, rest = parser().parse_known_args(argv)
    try:
        if args.command == "models":
            return _cmd_models(argv[argv.index("models") + 1:])
        if args.command in ("render", "cluster"):
            return kube_cli.main([args.command, *rest])
        if args.command == "batch":
            return _cmd_batch(args, rest)
        if args.command == "observability":
            return _cmd_observability(args, rest)
        if args.command == "image":
            return image_main(rest)
        if args.command == "speculator":
            if args.action == "rollout":
                from cluster.speculator_rollout import main as rollout_main
                return rollout_main(rest)
            if args.action == "loop":
                from cluster.speculator_loop import main as loop_main
                return loop_main(rest)
            from models.retrain import main as retrain_main
            return retrain_main(rest)
        if rest:
            parser().error(f"unrecognized arguments: {' '.join(rest)}")
        return {"serve": _cmd_serve, "validate": _cmd_validate}[args.command](args)
    except ConfigError as e:
        print(f"specserve: invalid config:\n{e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
