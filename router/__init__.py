"""The ingress: OpenAI-compatible HTTP, task classification and the per-request route decision."""
