"""The startup step-time profile (deployments/profile.py) on a simulated engine whose prefill
costs far more than its decode steps, as the weight-bound target's at batch 64 (4.9 s of prefill
against 337 ms decode steps, bench/results/2026-12-04-wide/profile-vs-decode.log), and is chunked
over several steps that also decode (vLLM's chunked prefill)."""

import asyncio
import sys

import pytest

from deployments import profile
from deployments.profile import profile_step_times

PREFILL_S = 0.5  # per request
CHUNK = 4  # requests prefilled per step at most


def step_s(batch: int) -> float:
    """The simulated engine's decode step: 10 ms at batch 1, growing with the batch."""
    return 0.010 * (1 + batch / 8)


class Engine:
    """A continuous-batching engine on a simulated clock. Each step prefills up to CHUNK waiting
    requests (one token each) and decodes every running request by `tokens_per_step`; its time is
    the sum of both parts."""

    def __init__(self, tokens_per_step: int = 1):
        self.clock = 0.0
        self.iterations = 0
        self.prompts: list[str] = []
        self.tokens_per_step = tokens_per_step
        self._waiting: list[list] = []
        self._running: list[list] = []
        self.itl_count, self.itl_sum = 0, 0.0  # decode-only inter-token latencies, as vLLM's

    def latencies(self) -> tuple[int, float]:
        return self.itl_count, self.itl_sum

    def tally(self, prefill: list, decode: list, step: float) -> None:
        """One inter-token latency per decoding request, in steps where no request got its
        first token (deployments/engine_metrics.py `decode_only_latencies`)."""
        if not prefill:
            self.itl_count += len(decode)
            self.itl_sum += step * len(decode)

    async def run_one(self, prompt: str, max_tokens: int, on_first) -> None:
        self.prompts.append(prompt)
        done = asyncio.get_running_loop().create_future()
        self._waiting.append([max_tokens, done, on_first])
        await done

    async def serve(self) -> None:
        while True:
            await asyncio.sleep(0)  # every request of a gather arrives before the next step
            if not self._waiting and not self._running:
                await asyncio.sleep(0.001)
                continue
            prefill, self._waiting = self._waiting[:CHUNK], self._waiting[CHUNK:]
            decode, self._running = self._running, []
            step = PREFILL_S * len(prefill) + (step_s(len(decode)) if decode else 0.0)
            self.clock += step
            self.tally(prefill, decode, step)
            self.iterations += 1
            for request in prefill:
                request[0] -= 1
                request[2]()
            for request in decode:
                request[0] -= self.tokens_per_step
            for request in prefill + decode:
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
def test_only_steps_in_which_every_request_decodes_are_timed(monkeypatch, tokens_per_step):
    engine = Engine(tokens_per_step)
    measured = measure(monkeypatch, engine, [1, 2, 4, 8, 16])
    assert measured == pytest.approx({b: step_s(b) for b in (1, 2, 4, 8, 16)})


@pytest.mark.parametrize("tokens_per_step", [1, 3])
def test_the_latency_tally_times_the_same_steps_as_the_wall_clock(monkeypatch, tokens_per_step):
    engine = Engine(tokens_per_step)
    wall: dict[int, float] = {}
    measured = measure(monkeypatch, engine, [1, 2, 4, 8, 16], latencies=engine.latencies,
                       wall=wall)
    expected = {b: step_s(b) for b in (1, 2, 4, 8, 16)}
    assert measured == pytest.approx(expected)
    assert wall == pytest.approx(expected)


def test_a_frontend_late_to_see_the_outputs_skews_the_wall_clock_not_the_latencies(
        monkeypatch):
    """The replica's frontend reads the clock later each time it gets a core (here 20 ms more
    at every reading), as when it waits for a core; vLLM stamps the
    latencies in the engine, so only the wall clock's windows grow."""
    engine = Engine(4)
    readings = iter(range(1 << 20))
    wall: dict[int, float] = {}

    async def main():
        server = asyncio.get_running_loop().create_task(engine.serve())
        try:
            return await profile_step_times(engine.run_one, lambda: engine.iterations, [1, 2],
                                            latencies=engine.latencies, wall=wall)
        finally:
            server.cancel()

    monkeypatch.setattr(profile.time, "perf_counter",
                        lambda: engine.clock + 0.020 * next(readings))
    measured = asyncio.run(main())
    assert measured == pytest.approx({1: step_s(1), 2: step_s(2)})
    steps_per_window = profile.DECODE_TOKENS // 4
    for b in (1, 2):  # one reading 20 ms later than the other, over ~12 steps
        assert wall[b] == pytest.approx(step_s(b) + 0.020 / steps_per_window, rel=0.1)


def test_a_batch_whose_requests_never_all_decode_together_is_left_out(monkeypatch):
    # 16 requests prefill over 4 steps; with 1 decode token the first finish before the last start
    measured = measure(monkeypatch, Engine(), [2, 16], decode_tokens=1)
    assert set(measured) == {2}


def test_no_two_prompts_share_a_prefix_cache_block(monkeypatch):
    engine = Engine()
    measure(monkeypatch, engine, [1, 2, 4], decode_tokens=4)
    assert len(engine.prompts) == 1 + 1 + 2 + 4  # the warm-up, then each batch once
    firsts = [p.splitlines()[0] for p in engine.prompts]
    assert len(set(firsts)) == len(firsts)


def test_no_batches_runs_nothing_and_a_zero_decode_length_is_refused(monkeypatch):
    engine = Engine()
    assert measure(monkeypatch, engine, []) == {}
    assert engine.prompts == []
    with pytest.raises(ValueError, match="decode_tokens"):
        measure(monkeypatch, Engine(), [1], decode_tokens=0)


KAPPA = 2e-6  # the simulated engine's seconds per step per decoding sequence per context token


def chars(text: str) -> int:
    """The simulated tokenizer: one token per character."""
    return len(text)


class ContextEngine(Engine):
    """`Engine` whose decode step also reads each decoding request's context (prompt + outputs so
    far, `chars` tokens): KAPPA seconds per context token, as a step reads its KV cache."""

    def __init__(self):
        super().__init__()
        self._context: dict[int, int] = {}

    async def run_one(self, prompt: str, max_tokens: int, on_first) -> None:
        self.prompts.append(prompt)
        done = asyncio.get_running_loop().create_future()
        request = [max_tokens, done, on_first]
        self._context[id(request)] = chars(prompt)
        self._waiting.append(request)
        await done

    async def serve(self) -> None:
        while True:
            await asyncio.sleep(0)
            if not self._waiting and not self._running:
                await asyncio.sleep(0.001)
                continue
            prefill, self._waiting = self._waiting[:CHUNK], self._waiting[CHUNK:]
            decode, self._running = self._running, []
            read = sum(self._context[id(r)] for r in decode)
            step = PREFILL_S * len(prefill) + (step_s(len(decode)) + KAPPA * read if decode
                                               else 0.0)
            self.clock += step
            self.tally(prefill, decode, step)
            self.iterations += 1
            for request in prefill:
                request[0] -= 1
                request[2]()
            for request in decode + prefill:
                if request not in prefill:
                    request[0] -= 1
                self._context[id(request)] += 1
                if request[0] <= 0:
                    request[1].set_result(None)
                else:
                    self._running.append(request)


def measure_context(monkeypatch, engine: Engine, batch: int, long_tokens: int, latencies=None):
    monkeypatch.setattr(profile.time, "perf_counter", lambda: engine.clock)

    async def main():
        server = asyncio.get_running_loop().create_task(engine.serve())
        try:
            return await profile.profile_context_cost(engine.run_one, lambda: engine.iterations,
                                                      batch, chars, long_tokens,
                                                      latencies=latencies)
        finally:
            server.cancel()

    return asyncio.run(main())


@pytest.mark.parametrize("by_latencies", [False, True])
def test_the_context_cost_is_the_step_time_a_context_token_adds_per_sequence(monkeypatch,
                                                                            by_latencies):
    engine = ContextEngine()
    kappa, ref = measure_context(monkeypatch, engine, 4, 2000,
                                 latencies=engine.latencies if by_latencies else None)
    assert kappa == pytest.approx(KAPPA, rel=1e-6)
    short = profile.profile_prompt(0)
    assert ref == pytest.approx(chars(short) + 1 + profile.DECODE_TOKENS / 2)
    long_prompts = [p for p in engine.prompts if chars(p) > 2 * chars(short)]
    assert len(long_prompts) == 2 * 4 and all(1900 < chars(p) <= 2000 for p in long_prompts)
    firsts = [p.splitlines()[0] for p in engine.prompts]
    assert len(set(firsts)) == len(firsts)  # no prefix-cache reuse between windows either


def test_an_engine_whose_steps_ignore_the_context_costs_nothing_per_token(monkeypatch):
    kappa, _ = measure_context(monkeypatch, Engine(), 4, 2000)
    assert kappa == pytest.approx(0.0, abs=1e-12)


def test_no_room_for_a_longer_prompt_measures_nothing(monkeypatch):
    engine = ContextEngine()
    assert measure_context(monkeypatch, engine, 4, 10) is None  # shorter than the short prompt
    assert engine.prompts == []
    assert profile.long_prompt_tokens(1024, 4) == 1024 - 1 - profile.DECODE_TOKENS - 4 - 8
    assert profile.long_prompt_tokens(131072) == profile.LONG_CONTEXT_TOKENS
    assert profile.long_prompt_tokens(40) == 0


def test_a_window_slowed_by_another_process_is_outvoted_by_the_repeat(monkeypatch):
    """The first long window runs beside something else (each of its steps 30 ms slower); the
    repeat does not, and the fastest of each side is kept. One pair alone believes the noise."""
    class Noisy(ContextEngine):
        long_seen = 0

        async def run_one(self, prompt, max_tokens, on_first):
            if chars(prompt) > 1000:
                self.long_seen += 1
            await super().run_one(prompt, max_tokens, on_first)

    engines: list[Noisy] = []
    real = step_s
    monkeypatch.setattr(sys.modules[__name__], "step_s", lambda b: real(b) + (
        0.030 if 0 < engines[-1].long_seen <= 4 else 0.0))

    def kappa(repeats: int) -> float:
        engine = Noisy()
        engines.append(engine)
        monkeypatch.setattr(profile.time, "perf_counter", lambda: engine.clock)

        async def main():
            server = asyncio.get_running_loop().create_task(engine.serve())
            try:
                return await profile.profile_context_cost(
                    engine.run_one, lambda: engine.iterations, 4, chars, 2000, repeats=repeats)
            finally:
                server.cancel()
        return asyncio.run(main())[0]

    assert kappa(2) == pytest.approx(KAPPA, rel=1e-6)
    assert kappa(1) > 2 * KAPPA


ENGINE = {"dtype": "float32", "max_num_seqs": 128, "tensor_parallel_size": 1,
          "speculative_config": {"method": "draft_model", "model": "/m/draft",
                                 "num_speculative_tokens": 4}}


def test_a_profile_key_names_the_engine_its_batches_and_its_hardware():
    key = profile.profile_key("/m/target", ENGINE, 128, "cpu EPYC x1")
    same = {k: ENGINE[k] for k in reversed(list(ENGINE))}  # the order of the arguments: no matter
    assert profile.profile_key("/m/target", same, 128, "cpu EPYC x1") == key
    others = [
        ("/m/target-wide", ENGINE, 128, "cpu EPYC x1"),
        ("/m/target", {**ENGINE, "dtype": "bfloat16"}, 128, "cpu EPYC x1"),
        ("/m/target", {**ENGINE, "speculative_config": {**ENGINE["speculative_config"],
                                                         "num_speculative_tokens": 3}},
         128, "cpu EPYC x1"),
        ("/m/target", {**ENGINE, "max_num_seqs": 64}, 128, "cpu EPYC x1"),
        ("/m/target", ENGINE, 64, "cpu EPYC x1"),
        ("/m/target", ENGINE, 128, "cpu Xeon x1"),
        ("/m/target", ENGINE, 128, "cpu EPYC x2"),
    ]
    keys = {profile.profile_key(*o) for o in others}
    assert key not in keys and len(keys) == len(others)
