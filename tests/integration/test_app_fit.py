"""The app builder refuses, at build time, CPU pools whose starting replicas a one-node Ray cannot
place (each CPU replica takes one logical CPU per tensor-parallel rank: the cores it owns), and
asks the default config's 1 + 1 replicas of nothing more than one CPU each. In a fresh process
with its own small local Ray: the session application's Ray is untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import ray
from core import ConfigError
from deployments.app import build_app
ray.init(num_cpus={cpus}, include_dashboard=False, log_to_driver=False)
try:
    build_app({{"config_path": "cluster/default.yaml"}})
    print("BUILT")
except ConfigError as e:
    print("REFUSED", e)
"""


LABELS_PROBE = """
import ray
from core import DEFAULT_CONFIG_PATH, ConfigError, SpecserveConfig
from deployments.app import build_app_from_config
ray.init(num_cpus={cpus}, include_dashboard=False, log_to_driver=False)
data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
data["speculative"]["node_labels"] = {{"specserve.io/pool": "speculative"}}
try:
    build_app_from_config(SpecserveConfig.from_dict(data))
    print("BUILT")
except ConfigError as e:
    print("REFUSED", e)
"""


def build_on(cpus: int, probe: str = PROBE) -> str:
    out = subprocess.run([sys.executable, "-c", probe.format(cpus=cpus)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    return out.stdout.strip().splitlines()[-1]


def test_default_config_fits_two_cpus_and_is_refused_on_one():
    assert build_on(2) == "BUILT"
    refused = build_on(1)
    assert refused.startswith("REFUSED vanilla/speculative.num_replicas: the CPU pools start "
                              "with 2 replica core(s)"), refused
    assert "this Ray node has 1 CPU(s)" in refused and "ray start --num-cpus" in refused


def test_labels_a_one_node_ray_lacks_are_refused_naming_the_field():
    refused = build_on(2, LABELS_PROBE)
    assert refused.startswith("REFUSED speculative.node_labels: this one-node Ray has no node "
                              "labelled specserve.io/pool=speculative"), refused


OPTIONS_PROBE = """
import json
from core import DEFAULT_CONFIG_PATH, SpecserveConfig
from deployments.pools import llm_config
from ray.serve.llm.deployment import LLMServer
cfg = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH)
opts = LLMServer.get_deployment_options(llm_config(cfg.model, cfg.speculative))
print(json.dumps(opts["placement_group_bundles"]))
"""


def test_a_cpu_replica_asks_one_cpu_per_rank_and_no_cpu_for_its_actor():
    # Ray Serve LLM's options builder connects to (or starts) a Ray: in its own process, so that
    # the session's Ray fixture does not find this one already initialized.
    out = subprocess.run([sys.executable, "-c", OPTIONS_PROBE], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [{"CPU": 1, "GPU": 0}]
