"""One streamed OpenAI request, timed: TTFT, inter-token latencies, tokens, route and acceptance.

Every benchmark request streams (`stream: true`) with `stream_options.include_usage`, so the final
chunk carries `usage.completion_tokens` and, on the speculative path, vLLM's per-request
`metrics.speculative_decoding.acceptance_histogram` (engine flag `per_request_spec_decode_metrics`).
Definitions (as in vLLM's `benchmarks/serve.py`): TTFT = time to the first chunk with text;
ITL = gaps between chunks with text; TPOT = (latency − TTFT) / (completion tokens − 1).
A speculative chunk can carry several tokens, so ITL and TPOT differ on that path.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass(slots=True)
class Sample:
    """What one request measured. Times in seconds from the request's send."""

    task: str
    ok: bool = False
    error: str = ""
    ttft_s: float = 0.0
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    route: str = ""
    reason: str = ""
    acceptance_histogram: list[int] = field(default_factory=list)
    sent_at_s: float = 0.0  # wall clock (perf_counter) of the send

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first; None for a one-token answer."""
        if self.completion_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.completion_tokens - 1)


async def stream_request(client: httpx.AsyncClient, path: str, body: dict, task: str) -> Sample:
    """Sends `body` to `path` with streaming on and times it.

    Never raises for HTTP or transport errors: they come back as `Sample(ok=False, error=...)`.
    """
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    s = Sample(task=task, sent_at_s=time.perf_counter())
    t0, last = s.sent_at_s, None
    try:
        async with client.stream("POST", path, json=body) as r:
            s.route = r.headers.get("x-specserve-route", "")
            s.reason = r.headers.get("x-specserve-reason", "")
            if r.status_code != 200:
                s.error = f"{r.status_code}: {(await r.aread()).decode()[:200]}"
                return s
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    s.error = str(chunk["error"])[:200]
                    return s
                now = time.perf_counter()
                if _chunk_text(chunk):
                    if last is None:
                        s.ttft_s = now - t0
                    else:
                        s.itl_s.append(now - last)
                    last = now
                if chunk.get("usage"):
                    s.completion_tokens = chunk["usage"]["completion_tokens"]
                    spec = (chunk.get("metrics") or {}).get("speculative_decoding") or {}
                    s.acceptance_histogram = list(spec.get("acceptance_histogram") or [])
    except httpx.HTTPError as e:
        s.error = f"{type(e).__name__}: {e}"
        return s
    s.latency_s = time.perf_counter() - t0
    s.ok = last is not None
    if not s.ok:
        s.error = "no text in the stream"
    return s


def _chunk_text(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    return c.get("text") or (c.get("delta") or {}).get("content") or ""
