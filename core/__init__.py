"""The basement every layer imports: the config model, the closed sets it names, the stats types
pool replicas report (and the names of the metrics they report to Serve's autoscaling), and the
spec-decode formulas (E[τ], S, the step-time model) that the router, the autoscaling policy, the
batch driver and the benchmarks share. Importing it loads no Ray.

Imports run one way: core <- router <- deployments, autoscaling <- cluster (CLI, batch, kube);
`core` imports none of them.
"""

from core.acceptance import AcceptanceEstimator, temperature_bucket
from core.arrivals import ArrivalCounter
from core.autoscaling_config import (POLICY_FUNCTION, AutoscalingConfig, PoolScalingConfig,
                                     serve_autoscaling_policy)
from core.capture_config import CaptureConfig
from core.checkpoints import check_checkpoints, check_speculator_matches_target
from core.config import (RAY_NODE_ENV, ModelConfig, RouterConfig, ServerConfig, SpecserveConfig,
                         haproxy_ports_env, use_ray_node_env)
from core.kube_config import RAY_VERSION, KubeConfig, WorkerGroupConfig
from core.logs import use_serve_log_handlers
from core.paths import (DEFAULT_CONFIG_PATH, MODELS_DIR_ENV, models_dir, read_config_value,
                        resolve_path)
from core.pool_config import PoolConfig, SpeculativePoolConfig, SpeculatorConfig, check_node_labels
from core.sources import load_config
from core.specdecode import batched_speedup, expected_tokens
from core.stats import (PUSH_PERIOD_S, STALE_AFTER_S, BoardSnapshot, EngineStats, PoolStats,
                        RouterState, busy_window_samples, per_position_acceptance)
from core.step_time import StepTimeModel
from core.types import ConfigError, RequestedRoute, Route, SpeculativeMethod, Strict, TaskType

__all__ = [
    "AcceptanceEstimator", "ArrivalCounter", "AutoscalingConfig", "batched_speedup",
    "BoardSnapshot", "busy_window_samples", "CaptureConfig", "check_checkpoints", "check_node_labels",
    "check_speculator_matches_target", "ConfigError", "DEFAULT_CONFIG_PATH",
    "EngineStats", "expected_tokens", "KubeConfig", "load_config",
    "ModelConfig", "models_dir", "MODELS_DIR_ENV", "per_position_acceptance", "POLICY_FUNCTION",
    "PoolConfig", "PoolScalingConfig", "PoolStats", "PUSH_PERIOD_S", "RAY_NODE_ENV", "haproxy_ports_env", "RAY_VERSION",
    "read_config_value", "RequestedRoute", "resolve_path", "Route", "RouterConfig", "RouterState",
    "serve_autoscaling_policy", "ServerConfig", "SpecserveConfig", "SpeculativeMethod",
    "SpeculativePoolConfig", "SpeculatorConfig", "STALE_AFTER_S", "StepTimeModel",
    "Strict", "TaskType", "temperature_bucket", "use_ray_node_env", "use_serve_log_handlers",
    "WorkerGroupConfig",
]
