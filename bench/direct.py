"""A plain Ray Serve LLM ingress over one specserve pool: the baseline for router overhead.

Deployed as its own application (route prefix `/direct`) next to a running specserve application,
it calls the pool's deployment handle with Ray Serve LLM's stock `OpenAiIngress`: same proxy, same
pool replica, same engine, no specserve routing. The difference in latency between
`/v1/completions` (specserve) and `/direct/v1/completions` is the router's overhead.
"""

from __future__ import annotations

from ray import serve
from ray.serve import Application
from ray.serve.llm.ingress import OpenAiIngress, make_fastapi_ingress

from core.ray_private import ModelCard

PREFIX = "/direct"


class DirectIngress(OpenAiIngress):
    """Ray Serve LLM's ingress bound to an existing deployment of another application.

    Args:
        app_name: the specserve application's name.
        pool: the pool deployment to call ("vanilla" or "speculative").
        model_id: the served model name.
    """

    def __init__(self, app_name: str, pool: str, model_id: str):
        card = ModelCard(id=model_id, object="model", owned_by="specserve", permission=[],
                         metadata={})
        super().__init__(llm_deployments={model_id: serve.get_deployment_handle(pool, app_name)},
                         model_cards={model_id: card})


def build_direct_app(app_name: str, pool: str, model_id: str) -> Application:
    """The `/direct` application over `pool` of the running application `app_name`."""
    ingress = serve.deployment(make_fastapi_ingress(DirectIngress), name="direct",
                               ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024)
    return ingress.bind(app_name=app_name, pool=pool, model_id=model_id)
