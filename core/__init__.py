"""The basement every layer imports: the config model, the closed sets it names, the stats types
pool replicas report, and the board that shares them.

Imports run one way: core <- router <- deployments <- cluster (CLI, batch, kube); `core` imports
none of them.
"""

from core.autoscaling_config import (POLICY_FUNCTION, AutoscalingConfig, PoolScalingConfig,
                                     serve_autoscaling_policy)
from core.board import StatsBoard, get_board
from core.checkpoints import (check_checkpoints, check_speculator_matches_target,
                              checkpoint_context, read_config_value)
from core.config import (RAY_NODE_ENV, ModelConfig, RouterConfig, ServerConfig,
                         SpecserveConfig, format_validation_error, load_config)
from core.kube_config import RAY_VERSION, KubeConfig, WorkerGroupConfig
from core.logs import use_serve_log_handlers
from core.paths import DEFAULT_CONFIG_PATH, MODELS_DIR_ENV, models_dir, resolve_path
from core.pool_config import PoolConfig, SpeculativePoolConfig, SpeculatorConfig, check_node_labels
from core.stats import (PUSH_PERIOD_S, STALE_AFTER_S, BoardSnapshot, EngineStats, PoolStats,
                        RouterState, busy_window_samples)
from core.types import ConfigError, Route, SpeculativeMethod, Strict, TaskType

__all__ = [
    "AutoscalingConfig", "BoardSnapshot", "ConfigError", "DEFAULT_CONFIG_PATH", "EngineStats",
    "KubeConfig", "MODELS_DIR_ENV", "ModelConfig", "POLICY_FUNCTION", "PUSH_PERIOD_S",
    "PoolConfig", "PoolScalingConfig", "PoolStats", "RAY_NODE_ENV", "RAY_VERSION", "Route", "RouterConfig",
    "RouterState", "STALE_AFTER_S", "ServerConfig", "SpecserveConfig", "SpeculativeMethod",
    "SpeculativePoolConfig", "SpeculatorConfig", "StatsBoard", "Strict", "TaskType",
    "WorkerGroupConfig", "busy_window_samples", "check_checkpoints",
    "check_node_labels", "check_speculator_matches_target", "checkpoint_context",
    "format_validation_error", "get_board", "load_config", "models_dir", "read_config_value",
    "resolve_path", "serve_autoscaling_policy", "use_serve_log_handlers",
]
