"""The two vLLM pools on Ray Serve and the application builder `build_app`.

Public modules, those other packages, configs and the docs use: `app` (`build_app`, the
`import_path` target, and `build_app_from_config`), `deploy` (`run_app`), `cores` (`node_cores`)
and `utilization` (`memory_bound_fraction`). The package imports none of them itself (several
load Ray Serve and vLLM).
"""

__all__ = ["app", "cores", "deploy", "utilization"]
