import asyncio, sys, time, httpx
from bench.client import stream_request
N, DUR, ROUTE = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
async def main():
    async with httpx.AsyncClient(base_url="http://127.0.0.1:8000", timeout=120) as c:
        end = time.monotonic() + DUR; toks = [0]
        async def loop():
            while time.monotonic() < end:
                s = await stream_request(c, "/v1/completions", {"model": "specserve-tiny",
                    "prompt": "def binary_search(items, target):\n    ", "max_tokens": 64,
                    "temperature": 0, "ignore_eos": True, "route": ROUTE}, "code")
                toks[0] += s.completion_tokens
        t0 = time.monotonic(); await asyncio.gather(*[loop() for _ in range(N)])
        print("tok/s", round(toks[0] / (time.monotonic() - t0)))
asyncio.run(main())
