"""router.metrics: the ingress's `/metrics`, its own `specserve_` series and the speculative pool's
spec-decode counters under vLLM's `vllm:` names (what `vllm bench serve` and vLLM's dashboards read).
"""

from prometheus_client.parser import text_string_to_metric_families

from core import EngineStats, PoolStats
from router.metrics import RouterMetrics
from router.policy import SpeedupModel


def _pools() -> dict[str, PoolStats]:
    spec = EngineStats(num_drafts=10, num_draft_tokens=40, num_accepted_tokens=22,
                       accepted_per_pos=[9, 7, 4, 2])
    return {"vanilla": PoolStats(replicas=1, engine=EngineStats(generation_tokens=500)),
            "speculative": PoolStats(replicas=2, engine=spec)}


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_vllm_names_carry_the_speculative_pools_counters():
    metrics = RouterMetrics(_pools, SpeedupModel(num_speculative_tokens=4), "specserve-tiny")
    samples = _samples(metrics.render().decode())
    labels = (("model_name", "specserve-tiny"), ("pool", "speculative"))
    assert samples[("vllm:spec_decode_num_drafts_total", labels)] == 10
    assert samples[("vllm:spec_decode_num_draft_tokens_total", labels)] == 40
    assert samples[("vllm:spec_decode_num_accepted_tokens_total", labels)] == 22
    per_pos = {dict(k)["position"]: v for (name, k), v in samples.items()
               if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total"}
    assert per_pos == {"0": 9, "1": 7, "2": 4, "3": 2}
    # the vanilla pool does not speculate: no vllm:spec_decode series of its own, as a vLLM
    # server without speculative_config exports none; specserve's own series keep both pools
    assert not [k for (name, k) in samples if name.startswith("vllm:") and ("pool", "vanilla") in k]
    assert samples[("specserve_spec_decode_num_drafts_total", (("pool", "vanilla"),))] == 0
    assert samples[("specserve_spec_decode_num_drafts_total", (("pool", "speculative"),))] == 10


def test_no_speculative_pool_means_no_vllm_series_values():
    metrics = RouterMetrics(lambda: {"vanilla": PoolStats(replicas=1)},
                            SpeedupModel(num_speculative_tokens=4), "m")
    text = metrics.render().decode()
    assert not [line for line in text.splitlines() if line.startswith("vllm:")]
