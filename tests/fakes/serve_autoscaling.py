"""Stand-ins for what Ray Serve's controller hands an application autoscaling policy: a
`DeploymentID` and an `AutoscalingContext`, with only the attributes specserve's adapter
(autoscaling/controller.py) reads, so its mapping can be scripted without a Serve controller."""

from __future__ import annotations


class FakeDeploymentId:
    def __init__(self, name):
        self.name, self.app_name = name, "app"


class FakeContext:
    """The attributes of Serve's AutoscalingContext the adapter reads."""

    def __init__(self, n, ongoing, metrics, state=None, target=None):
        self.current_num_replicas, self.target_num_replicas = n, n if target is None else target
        self.running_replicas = [f"r{i}" for i in range(n)]
        self.total_num_requests = ongoing
        self.aggregated_metrics = metrics
        self.policy_state = state or {}
        self.current_time = 50.0
