"""The startup step-time profile (deployments/profile.py) on a simulated engine whose prefill
costs far more than its decode steps, as the weight-bound target's at batch 64 (4.9 s of prefill
against 337 ms decode steps, bench/results/2026-12-04-wide/profile-vs-decode.log)."""

import asyncio

import pytest

from deployments import profile
from deployments.profile import profile_step_times

PREFILL_S = 0.5  # per request, in one engine step


def step_s(batch: int) -> float:
    """The simulated engine's decode step: 10 ms at batch 1, growing with the batch."""
    return 0.010 * (1 + batch / 8)


class Engine:
    """A continuous-batching engine on a simulated clock: each step either prefills every request
    that arrived (one token each) or decodes every running request by `tokens_per_step`."""

    def __init__(self, tokens_per_step: int = 1):
        self.clock = 0.0
        self.iterations = 0
        self.prompts: list[str] = []
        self.tokens_per_step = tokens_per_step
        self._new: list[list] = []
        self._running: list[list] = []

    async def run_one(self, prompt: str, max_tokens: int) -> None:
        self.prompts.append(prompt)
        done = asyncio.get_running_loop().create_future()
        self._new.append([max_tokens, done])
        await done

    async def serve(self) -> None:
        while True:
            await asyncio.sleep(0)  # every request of a gather arrives before the next step
            if self._new:
                batch, self._new = self._new, []
                self.clock += PREFILL_S * len(batch)
                emitted = 1
            elif self._running:
                batch, self._running = self._running, []
                self.clock += step_s(len(batch))
                emitted = self.tokens_per_step
            else:
                await asyncio.sleep(0.001)
                continue
            self.iterations += 1
            for request in batch:
                request[0] -= emitted
                if request[0] <= 0:
                    request[1].set_result(None)
                else:
                    self._running.append(request)


def measure(monkeypatch, engine: Engine, batches: list[int], **kw) -> dict[int, float]:
    monkeypatch.setattr(profile.time, "perf_counter", lambda: engine.clock)

    async def main():
        server = asyncio.get_running_loop().create_task(engine.serve())
        try:
            return await profile_step_times(engine.run_one, lambda: engine.iterations, batches,
                                            **kw)
        finally:
            server.cancel()

    return asyncio.run(main())


@pytest.mark.parametrize("tokens_per_step", [1, 3])
def test_the_prefill_drops_out_of_the_decode_step_time(monkeypatch, tokens_per_step):
    engine = Engine(tokens_per_step)
    measured = measure(monkeypatch, engine, [1, 2, 4, 8, 16])
    assert measured == pytest.approx({b: step_s(b) for b in (1, 2, 4, 8, 16)})


def test_no_two_prompts_share_a_prefix_cache_block(monkeypatch):
    engine = Engine()
    measure(monkeypatch, engine, [1, 2, 4], decode_tokens=4)
    assert len(engine.prompts) == 1 + 2 * (1 + 2 + 4)  # the warm-up, then two runs per batch
    firsts = [p.splitlines()[0] for p in engine.prompts]
    assert len(set(firsts)) == len(firsts)


def test_no_batches_runs_nothing_and_a_zero_decode_length_is_refused(monkeypatch):
    engine = Engine()
    assert measure(monkeypatch, engine, []) == {}
    assert engine.prompts == []
    with pytest.raises(ValueError, match="decode_tokens"):
        measure(monkeypatch, Engine(), [1], decode_tokens=0)
