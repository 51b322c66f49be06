"""`llm_config`: a pool's placement (strategy, node labels) as Ray Serve LLM and Serve take it."""

from core import DEFAULT_CONFIG_PATH, SpecserveConfig
from deployments.pools import llm_config


def _pool(**fields):
    data = SpecserveConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    data["speculative"] |= fields
    cfg = SpecserveConfig.from_dict(data)
    return llm_config(cfg.model, cfg.speculative)


def test_default_pool_packs_its_bundles_on_one_node_and_selects_no_labels():
    llm = _pool()
    assert llm.placement_group_config == {"bundles": [{"CPU": 1}], "strategy": "STRICT_PACK"}
    assert "placement_group_bundle_label_selector" not in llm.deployment_config


def test_node_labels_select_every_bundle():
    llm = _pool(node_labels={"specserve.io/pool": "speculative"})
    assert llm.deployment_config["placement_group_bundle_label_selector"] == [
        {"specserve.io/pool": "speculative"}]
    assert llm.deployment_config["ray_actor_options"] == {"num_cpus": 0}
