"""Rendering the KubeRay manifests from the config: drift, KubeRay conventions, refusals naming the
field, and the static layer (JSON Schema from the KubeRay v1.7.0 CRDs). No API server needed."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from cluster import cli
from cluster.commented_yaml import dump, plain
from core import RAY_VERSION, SpecserveConfig
from core.kube_config import project_image
from cluster.kube.render import MANIFESTS_DIR, app_args, rayjob, rayservice, render_all

CONFIGS = sorted((MANIFESTS_DIR / "configs").glob("*.yaml"))
MANIFESTS = sorted(MANIFESTS_DIR.glob("ray-*.yaml"))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _cluster(obj: dict) -> dict:
    return obj["spec"].get("rayClusterConfig") or obj["spec"]["rayClusterSpec"]


def _pods(obj: dict):
    cluster = _cluster(obj)
    yield "head", cluster["headGroupSpec"]
    for group in cluster["workerGroupSpecs"]:
        yield group["groupName"], group


def test_committed_manifests_match_what_the_configs_render():
    rendered = render_all()
    assert {p.name for p in rendered} == {p.name for p in MANIFESTS}, "run `specserve render --all`"
    for path, (text, _) in rendered.items():
        assert path.read_text() == text, f"{path.name} drifted: run `specserve render --all`"


def test_render_check_reports_drift(tmp_path, capsys):
    assert cli.main(["render", "--all", "--out", str(tmp_path)]) == 0
    assert cli.main(["render", "--all", "--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "ray-service.cpu.yaml").write_text("stale\n")
    assert cli.main(["render", "--all", "--check", "--out", str(tmp_path)]) == 1
    assert "ray-service.cpu.yaml differs from manifests/configs/cpu.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_follows_kuberay_sample_conventions(path):
    obj = _load(path)
    variant = path.name.split(".")[1]
    stem = "ray-service" if obj["kind"] == "RayService" else "ray-job"
    assert path.name == f"{stem}.{variant}.yaml"
    cluster = _cluster(obj)
    assert cluster["rayVersion"] == RAY_VERSION
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    for group, pod in _pods(obj):
        for c in pod["template"]["spec"]["containers"]:
            assert c["image"] == project_image(variant), (group, c["image"])
            assert c["resources"]["requests"] and c["resources"]["limits"], group
            assert c["ports"] and all(p["name"] for p in c["ports"]), group
            assert {"name": "SPECSERVE_MODELS_DIR", "value": "/models"} in c["env"]
    head_ports = {p["name"] for p in cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
                  ["ports"]}
    assert {"gcs-server", "dashboard", "client", "serve"} <= head_ports


def test_gpu_rayservice_sizes_worker_pods_for_tensor_parallel_4():
    obj = _load(MANIFESTS_DIR / "ray-service.gpu.yaml")
    cfg = SpecserveConfig.from_yaml(MANIFESTS_DIR / "configs" / "gpu.yaml")
    groups = {g["groupName"]: g for g in _cluster(obj)["workerGroupSpecs"]}
    assert set(groups) == {"vanilla", "speculative"}
    for name, group in groups.items():
        pool = getattr(cfg, name)
        assert pool.accelerator == "gpu" and pool.tensor_parallel_size == 4
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 4
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert group["replicas"] == pool.num_replicas  # one 4-GPU pod per TP=4 replica
        assert any(v["name"] == "dshm" and v["emptyDir"]["medium"] == "Memory"
                   for v in group["template"]["spec"]["volumes"])
    assert obj["spec"]["upgradeStrategy"] == {"type": "NewCluster"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_worker_group_carries_the_labels_its_pool_selects(path):
    obj = _load(path)
    cfg = SpecserveConfig.from_yaml(MANIFESTS_DIR / "configs" / f"{path.stem.split('.')[-1]}.yaml")
    cluster = _cluster(obj)
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    for name, group in groups.items():
        assert getattr(cfg, name).node_labels == {"specserve.io/pool": name}
        assert group["labels"] == getattr(cfg, name).node_labels
        assert "labels" not in group["rayStartParams"]  # KubeRay passes `labels` to ray start
    assert cluster["headGroupSpec"]["labels"] == cfg.server.node_labels
    assert len({tuple(g["labels"].items()) for g in groups.values()}) == len(groups)


def test_a_pool_without_node_labels_renders_no_group_labels():
    cfg = SpecserveConfig.from_yaml(CONFIGS[0])
    data = cfg.model_dump(mode="json", exclude_unset=True)
    for part in ("vanilla", "speculative", "server"):
        data[part].pop("node_labels")
    cluster = plain(rayservice(SpecserveConfig.from_dict(data)))["spec"]["rayClusterConfig"]
    assert all("labels" not in g for g in [cluster["headGroupSpec"],
                                           *cluster["workerGroupSpecs"]])


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_serve_config_points_at_the_builder_with_the_config_as_args(config):
    cfg = SpecserveConfig.from_yaml(config)
    serve = yaml.safe_load(plain(rayservice(cfg))["spec"]["serveConfigV2"])
    ServeDeploySchema.model_validate(serve)  # Ray Serve's own schema for serveConfigV2
    (app,) = serve["applications"]
    assert app["import_path"] == "deployments.app:build_app"
    assert serve["http_options"] == {"host": "0.0.0.0", "port": cfg.server.port}
    back = SpecserveConfig.from_dict(app["args"])  # what build_app's load_config does
    assert back.model_dump(exclude={"kubernetes"}) == cfg.model_dump(exclude={"kubernetes"})


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_rayjob_is_for_offline_batch(config):
    cfg = SpecserveConfig.from_yaml(config)
    spec = plain(rayjob(cfg, "b", "/data/a b.jsonl", "/data/out.jsonl"))["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] == cfg.kubernetes.batch.ttl_seconds_after_finished
    assert spec["submitterConfig"]["backoffLimit"] >= 1  # tolerates a slow head
    assert spec["preRunningDeadlineSeconds"] == cfg.kubernetes.batch.pre_running_deadline_s
    assert "--input '/data/a b.jsonl' --output /data/out.jsonl" in spec["entrypoint"]
    env = yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]
    assert SpecserveConfig.from_dict(yaml.safe_load(env["SPECSERVE_CONFIG_JSON"])) == \
        SpecserveConfig.from_dict(app_args(cfg))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_cluster_turns_on_ray_token_auth(path):
    obj = _load(path)
    secret = SpecserveConfig.from_yaml(
        MANIFESTS_DIR / "configs" / f"{path.stem.split('.')[1]}.yaml").kubernetes.ray_auth_secret
    assert _cluster(obj)["authOptions"] == ({"mode": "token", "secretName": secret} if secret
                                            else {"mode": "token"})
    for _, pod in _pods(obj):  # KubeRay sets the token; a manifest never carries one
        env = pod["template"]["spec"]["containers"][0]["env"]
        assert not [e for e in env if e["name"].startswith("RAY_AUTH")]


def test_ray_token_auth_can_be_turned_off():
    data = _load(MANIFESTS_DIR / "configs" / "cpu.yaml")
    data["kubernetes"]["ray_token_auth"] = False
    obj = plain(rayservice(SpecserveConfig.from_dict(data)))
    assert "authOptions" not in obj["spec"]["rayClusterConfig"]


SELF_DESCRIBING = {"name", "value", "containerPort", "mountPath", "readOnly", "claimName",
                   "persistentVolumeClaim", "emptyDir", "medium", "sizeLimit", "key", "operator",
                   "effect", "cpu", "memory", "nvidia.com/gpu", "type", "annotations",
                   "apiVersion", "kind", "spec", "backoffLimit", "app.kubernetes.io/name",
                   "app.kubernetes.io/component", "specserve.io/serve-config-hash"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_one_comment_above_each_field(path):
    lines, block_indent = path.read_text().splitlines(), None
    for prev, line in zip(lines, lines[1:]):
        indent = len(line) - len(line.lstrip())
        if block_indent is not None and (not line.strip() or indent > block_indent):
            continue  # inside serveConfigV2 / runtimeEnvYAML text
        block_indent = indent if line.rstrip().endswith(("|", "|-")) else None
        m = re.match(r"\s*(?:- )?([\w.\-/]+):", line)
        if m and not line.lstrip().startswith("#") and m[1] not in SELF_DESCRIBING:
            assert prev.lstrip().startswith("#"), f"no comment above {m[1]!r}: {line.strip()}"


def test_commented_yaml_round_trips():
    cfg = SpecserveConfig.from_yaml(CONFIGS[0])
    for obj in (rayservice(cfg), rayjob(cfg)):
        assert yaml.safe_load(dump(obj)) == plain(obj)


def _config(tmp_path, **changes) -> str:
    data = yaml.safe_load((MANIFESTS_DIR / "configs" / "gpu.yaml").read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for p in parents:
            node = node[p]
        node[leaf] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("changes, message", [
    ({"vanilla__tensor_parallel_size": 3},
     "vanilla.tensor_parallel_size: 3 does not divide kubernetes.workers.vanilla.gpus (4 GPUs"),
    ({"speculative__speculator__num_speculative_tokens": 0},
     "speculative.speculator.num_speculative_tokens: Input should be greater than or equal to 1"),
    ({"speculative__speculator__model": None},
     "speculative.speculator.model: required for method 'eagle3'"),
    ({"kubernetes__workers__speculative__gpus": 0},
     "kubernetes.workers.speculative.gpus: speculative.accelerator is 'gpu' but its pods have no"),
    ({"kubernetes__workers__vanilla__max_replicas": 1},
     "kubernetes.workers.vanilla.max_replicas: vanilla.num_replicas 2 needs 2 pods"),
    ({"kubernetes__image": "rayproject/ray:2.9.0-gpu"},
     "kubernetes.image: tag '2.9.0-gpu' does not carry ray_version '2.60.0'"),
    ({"model__path": "/home/me/llama"}, "model.path: '/home/me/llama' is not on the models volume"),
    ({"speculative__speculator__draft_tensor_parallel_size": 2},
     "speculative.speculator.draft_tensor_parallel_size: 2 must be 1 or speculative."
     "tensor_parallel_size 4"),
    ({"autoscaling": {"enabled": True, "budget_accelerators": 40,
                      "vanilla": {"min_replicas": 1, "max_replicas": 6}}},
     "kubernetes.workers.vanilla.max_replicas: autoscaling.vanilla.max_replicas 6 needs 6 pods "
     "of 1 replica(s), above max_replicas 4"),
])
def test_invalid_config_is_refused_before_any_api_call_naming_the_field(tmp_path, capsys,
                                                                       changes, message):
    path = _config(tmp_path, **changes)
    assert cli.main(["render", "--config", path]) == 2
    assert message in capsys.readouterr().err
    # `cluster apply` refuses it the same way without reaching for credentials or the network
    assert cli.main(["cluster", "apply", "--config", path, "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert message in err and "credentials" not in err


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_the_crd_json_schema(crd_schemas, path):
    obj = _load(path)
    jsonschema.validate(obj, crd_schemas[obj["kind"]])


@pytest.mark.parametrize("mutate, where", [
    (lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(minReplica=1), "minReplica"),
    (lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(replicas="2"), "'2'"),
    (lambda s: s["rayClusterConfig"]["autoscalerOptions"].update(upscalingMode="Fast"), "Fast"),
])
def test_json_schema_catches_typos_and_wrong_types(crd_schemas, mutate, where):
    obj = _load(MANIFESTS_DIR / "ray-service.gpu.yaml")
    mutate(obj["spec"])
    with pytest.raises(jsonschema.ValidationError, match=re.escape(where)):
        jsonschema.validate(obj, crd_schemas["RayService"])


def test_image_defaults_to_the_project_image_of_the_pools_engine():
    cpu = SpecserveConfig.from_yaml("cluster/default.yaml")
    assert cpu.kubernetes.image == project_image("cpu") == "specserve:0.1.0-ray2.60.0-py311-cpu"
    data = cpu.model_dump(mode="json", exclude_unset=True)
    data["kubernetes"].pop("image")
    data["speculative"].update(accelerator="gpu", tensor_parallel_size=4)
    data["kubernetes"]["workers"] = {"speculative": {"gpus": 4}}
    data["autoscaling"] = {"enabled": False}
    gpu = SpecserveConfig.from_dict(data)
    assert gpu.kubernetes.image == project_image("gpu")
    # a named image wins, and the rendered pods carry it
    data["kubernetes"]["image"] = "registry.example.com/ml/specserve:0.1.0-ray2.60.0-py311-gpu"
    named = SpecserveConfig.from_dict(data)
    containers = [c for _, pod in _pods(plain(rayservice(named)))
                  for c in pod["template"]["spec"]["containers"]]
    assert {c["image"] for c in containers} == {data["kubernetes"]["image"]}


def test_the_distribution_version_is_the_images():
    import tomllib

    from core.kube_config import SPECSERVE_VERSION
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    assert project["version"] == SPECSERVE_VERSION
