"""Probe: does a request on the speculative pool run slower right after the other pool ran one?"""
import itertools, json, sys, time, statistics, urllib.request
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench.workload import jobs
URL = "http://127.0.0.1:8000"
js = list(itertools.islice(jobs("mixed", "specserve-wide", seed=int(sys.argv[1]) if len(sys.argv) > 1 else 0), 40))
chat = next(j for j in js if j.task == "chat")
creative = next(j for j in js if j.task == "creative")
code = next(j for j in js if j.task == "code")

def send(job, route, seed=1):
    body = {**job.body, "route": route, "seed": seed}
    req = urllib.request.Request(URL + job.path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        out = json.loads(r.read()); h = dict(r.headers)
    dt = time.perf_counter() - t
    n = out["usage"]["completion_tokens"]
    return dt * 1000 / n, h.get("x-specserve-route") or h.get("X-Specserve-Route"), h

print("chat max_tokens", chat.body["max_tokens"], "creative", creative.body["max_tokens"])
_, _, h = send(chat, "auto"); print({k: v for k, v in h.items() if "specserve" in k.lower()})
res = {}
for rnd in range(4):
    for name, before, broute, route in [("spec-alone", None, None, "speculative"),
                                        ("auto-alone", None, None, "auto"),
                                        ("after-vanilla-creative", creative, "vanilla", "speculative"),
                                        ("after-spec-creative", creative, "speculative", "speculative"),
                                        ("after-vanilla-code", code, "vanilla", "speculative")]:
        if before is not None:
            send(before, broute)
        ms, rt, _ = send(chat, route)
        res.setdefault(name, []).append(ms)
for k, v in res.items():
    print(f"{k:28s} ms/token median {statistics.median(v):6.2f}  all {[round(x,1) for x in v]}")

# Run 2026-12-06 against `make serve-wide` (cluster/examples/wide.yaml), ready in 192 s:
# chat max_tokens 126 creative 224
# {'x-specserve-route': 'speculative', 'x-specserve-reason': 'speculation_pays', 'x-specserve-task': 'chat', 'x-specserve-speedup': '1.42'}
# spec-alone                   ms/token median  25.58  all [25.6, 25.2, 25.5, 27.0]
# auto-alone                   ms/token median  24.71  all [24.6, 24.7, 24.7, 27.1]
# after-vanilla-creative       ms/token median  26.07  all [25.2, 26.0, 26.2, 26.1]
# after-spec-creative          ms/token median  25.53  all [24.9, 26.4, 25.5, 25.5]
# after-vanilla-code           ms/token median  26.52  all [25.5, 26.4, 26.9, 26.6]
