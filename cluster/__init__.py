"""Cluster operation: the one config, the CLI, and (later) KubeRay manifests and jobs."""
