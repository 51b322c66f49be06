"""`python -m bench.budget_live`: the budget split in the live controller, phase by phase.

Serves the default config through `specserve serve` with `autoscaling.policy: budget` (vanilla
0..2 replicas, speculative 1..2, delays 5 s / 20 s, `demand_window_s` 30), drives phases of
closed-loop load (a few requests pinned to vanilla, which wakes and profiles it; code at
concurrency 1; a burst at 24; a lull), and after each prints the routes it saw and
`GET /admin/autoscaling`: the offered load per class the board computed and the last decisions
with their reasons and predicted gains. A check that the wiring runs, not the trace benchmark
(`bench.budget_trace`): it compares nothing. Port 8311; the serve log goes to /tmp/budget-serve.log.
"""
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from core import DEFAULT_CONFIG_PATH


def main() -> None:
    """Runs the phases (module doc)."""
    PORT = 8311
    cfg = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    cfg["autoscaling"] |= {"policy": "budget", "vanilla": {"min_replicas": 0, "max_replicas": 2},
                           "speculative": {"min_replicas": 1, "max_replicas": 2},
                           "upscale_delay_s": 5, "downscale_delay_s": 20, "demand_window_s": 30}
    for p in ("vanilla", "speculative"):
        cfg[p] |= {"enforce_eager": True, "profile_max_batch": 8}
    cfg["server"]["port"] = PORT
    path = Path(tempfile.mkdtemp()) / "budget.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = open("/tmp/budget-serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", "serve", "--config", str(path)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{PORT}"
    try:
        t0 = time.time()
        while "specserve ready" not in Path(log.name).read_text():
            assert proc.poll() is None and time.time() - t0 < 600, "serve did not come up"
            time.sleep(2)
        print(f"ready after {time.time() - t0:.0f} s", flush=True)
        CODE = ["def fibonacci(n):\n    ", "class Stack:\n    def __init__(self):\n",
                "def parse(line: str) -> dict:\n    "]

        async def phase(name, concurrency, seconds, prompts, max_tokens=48, route="auto"):
            routes, n = {}, 0
            async with httpx.AsyncClient(base_url=base, timeout=300) as c:
                end = time.time() + seconds
                async def worker(i):
                    nonlocal n
                    while time.time() < end:
                        r = await c.post("/v1/completions", json={"model": "specserve-tiny",
                            "prompt": prompts[i % len(prompts)], "max_tokens": max_tokens,
                            "temperature": 0, "route": route})
                        key = (r.status_code, r.headers.get("x-specserve-route"))
                        routes[key] = routes.get(key, 0) + 1
                        n += 1
                await asyncio.gather(*(worker(i) for i in range(concurrency)))
            info = httpx.get(base + "/admin/autoscaling", timeout=30).json()
            print(json.dumps({"phase": name, "requests": n,
                              "routes": {str(k): v for k, v in routes.items()},
                              "policy": info["policy"], "calls": info["calls"],
                              "demand": info["inputs"]["demand"],
                              "step_time_pools": sorted(info["inputs"]["step_times"])}), flush=True)
            for e in info["events"][-6:]:
                keys = ("pool", "action", "reason", "pending", "previous", "replicas", "gain")
                print("   ", json.dumps({k: e[k] for k in keys}), flush=True)

        asyncio.run(phase("wake vanilla (pinned)", 1, 5, CODE, route="vanilla"))
        asyncio.run(phase("low code c=1", 1, 90, CODE))
        asyncio.run(phase("burst c=24", 24, 120, CODE + ["The history of the city begins"], 96))
        asyncio.run(phase("lull c=1", 1, 90, CODE))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
