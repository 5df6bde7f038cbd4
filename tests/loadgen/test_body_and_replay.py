"""Pure parts: request bodies, arrival plans, and session replay ordering (no network)."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from loadgen_support import make_workload

from benchcamp.loadgen.body import chat_body, completions_body
from benchcamp.loadgen.replay import (
    Replayer,
    closed_slots,
    cycle_id,
    open_arrivals,
    open_plan,
    trace_plan,
)
from benchcamp.workload.model import Request, Session
from benchcamp.workload.tokens import prompt_text, prompt_tokens


@pytest.mark.parametrize("prompt_len", [1, 15, 16, 17, 100, 128])
def test_completions_body_is_exactly_the_workload_tokens(prompt_len):
    blocks = tuple(range(7, 15))
    body = json.loads(completions_body("m", blocks, prompt_len, 33, 16, 32000))
    assert body["prompt"] == prompt_tokens(blocks, prompt_len, 16, 32000)
    assert body["max_tokens"] == body["min_tokens"] == 33
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m"


def test_chat_body_has_text_and_fixed_output():
    body = json.loads(chat_body('m"x', (1, 2), 20, 4, 16, 32000))
    assert body["model"] == 'm"x'
    assert len(body["messages"][0]["content"].split()) == 20
    assert body["max_tokens"] == body["min_tokens"] == 4


@pytest.mark.parametrize("prompt_len", [1, 15, 16, 17, 100])
def test_text_prompts_are_the_same_blocks_as_words_and_keep_shared_prefixes(prompt_len):
    """For servers that refuse token ids: the prompt as text, block by block, so prompts that
    share leading blocks share a text prefix; optional vLLM sampling fields left out."""
    blocks, salt = tuple(range(7, 15)), 99
    body = json.loads(completions_body("m", blocks, prompt_len, 33, 16, 32000, salt, prompt="text",
                                       vllm_sampling=False))
    assert body["prompt"] == prompt_text(blocks, prompt_len, 16, 32000, salt)
    assert body["max_tokens"] == 33 and "min_tokens" not in body and "ignore_eos" not in body
    assert body["stream_options"] == {"include_usage": True}
    longer = json.loads(completions_body("m", blocks[:2] + (77, 78), 64, 1, 16, 32000, salt, prompt="text"))
    shared = prompt_text(blocks, 32, 16, 32000, salt)
    assert longer["prompt"].startswith(shared + " ")
    assert body["prompt"].split() == prompt_text(blocks, 128, 16, 32000, salt).split()[:prompt_len]
    assert longer["min_tokens"] == 1 and longer["ignore_eos"] is True
    chat = json.loads(chat_body("m", blocks, prompt_len, 3, 16, 32000, salt, vllm_sampling=False))
    assert chat["messages"][0]["content"] == body["prompt"] and "min_tokens" not in chat


def test_prompt_longer_than_blocks_is_an_error():
    with pytest.raises(ValueError, match="prompt_len"):
        completions_body("m", (1,), 17, 1, 16, 32000)


def test_closed_slots_split_evenly():
    assert closed_slots(10, 3) == [4, 3, 3]
    assert sum(closed_slots(1000, 7)) == 1000


def test_open_arrivals_rate_and_gamma_burstiness():
    pois = open_arrivals(50.0, 200.0, "poisson", 1.0, seed=1)
    assert abs(len(pois) / 200.0 - 50.0) < 2.5
    assert np.all(np.diff(pois) > 0) and pois.max() < 200.0
    bursty = np.diff(open_arrivals(50.0, 200.0, "gamma", 0.25, seed=1))
    assert abs(1 / bursty.mean() - 50.0) < 5
    # coefficient of variation: 1 for Poisson, 1/sqrt(shape) = 2 for gamma(0.25)
    assert 1.7 < bursty.std() / bursty.mean() < 2.3
    assert np.array_equal(pois, open_arrivals(50.0, 200.0, "poisson", 1.0, seed=1))
    with pytest.raises(ValueError, match="load.arrival"):
        open_arrivals(1.0, 1.0, "uniform", 1.0, 0)


def test_open_plan_round_robin_and_trace_scale():
    plan = open_plan(3, 20.0, 5.0, 2, "poisson", 1.0, 0)
    js = sorted(j for w in plan for j, _ in w)
    assert js == list(range(len(js))) and all(j % 2 == 0 for j, _ in plan[0])
    top = [Session(f"s{i}", [], arrival_s=float(a)) for i, a in enumerate([4.0, 0.0, 2.0, 100.0])]
    plan = trace_plan(top, 2.0, 10.0, 1)
    assert plan == [[(1, 0.0), (2, 1.0), (0, 2.0)]]  # 100 s / 2 = 50 s is past the horizon
    assert cycle_id("s1", 0) == "s1" and cycle_id("s1", 2) == "s1~2"


class FakeClock:
    """Send takes a fixed time; records what was sent when."""

    def __init__(self, service_s: float = 0.02) -> None:
        self.t0 = time.monotonic()
        self.service_s = service_s
        self.sent: list[tuple[str, int, float, float]] = []   # session, turn, scheduled, sent
        self.ended: dict[tuple[str, int], float] = {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def send(self, turn, payload) -> float:
        self.sent.append((turn.session_id, turn.request.turn, turn.scheduled_s, self.now()))
        await asyncio.sleep(self.service_s)
        end = self.now()
        self.ended[(turn.session_id, turn.request.turn)] = end
        return end


@pytest.mark.alone  # send times asserted within 10-50 ms of the schedule
def test_subagents_start_after_parent_turn_and_join_before_next():
    wl = make_workload(n_sessions=1, turns=2, think_s=0.05, subagents={0: 2})
    clock = FakeClock()
    rep = Replayer(wl, lambda t: None, clock.send, clock.now, lambda: 1e9)
    asyncio.run(rep.session(wl.sessions[0], 0, 0.0))
    order = [(s, t) for s, t, _, _ in clock.sent]
    assert order[0] == ("s0", 0) and order[-1] == ("s0", 1)
    assert {x for x in order[1:-1]} == {("s0.a0", 0), ("s0.a0", 1), ("s0.a1", 0), ("s0.a1", 1)}
    sent = {(s, t): (sch, snt) for s, t, sch, snt in clock.sent}
    # subagents start when the parent turn ends; they run concurrently
    assert sent[("s0.a0", 0)][1] >= clock.ended[("s0", 0)]
    assert abs(sent[("s0.a0", 0)][1] - sent[("s0.a1", 0)][1]) < 0.01
    # the parent's next turn is scheduled think_s after the last subagent ended
    last_kid = max(clock.ended[(k, 1)] for k in ("s0.a0", "s0.a1"))
    assert sent[("s0", 1)][0] == pytest.approx(last_kid + 0.05, abs=1e-9)
    assert sent[("s0", 1)][1] >= sent[("s0", 1)][0]


@pytest.mark.alone  # send times asserted within 10-50 ms of the schedule
def test_stop_time_ends_sessions_and_closed_cycles_ids():
    wl = make_workload(n_sessions=2, turns=50)
    clock = FakeClock(service_s=0.01)
    rep = Replayer(wl, lambda t: None, clock.send, clock.now, lambda: 0.2)
    asyncio.run(rep.closed(3, iter(range(100))))
    assert all(snt < 0.2 + 0.01 for _, _, _, snt in clock.sent)
    assert {s for s, *_ in clock.sent} == {"s0", "s1", "s0~1"}  # 3 slots: the third reuses s0 as s0~1


@pytest.mark.alone  # send times asserted within 10-50 ms of the schedule
def test_workload_with_session_arrivals_replays_at_times():
    wl = make_workload(n_sessions=2, turns=1)
    clock = FakeClock(service_s=0.0)
    rep = Replayer(wl, lambda t: None, clock.send, clock.now, lambda: 1e9)
    asyncio.run(rep.scheduled([(0, 0.05), (1, 0.1), (2, 0.15)]))
    assert [s for s, *_ in clock.sent] == ["s0", "s1", "s0~1"]
    for (_, _, sch, snt), want in zip(clock.sent, (0.05, 0.1, 0.15)):
        assert sch == want and 0 <= snt - sch < 0.05


class CountingSequence:
    """closed_sequence stand-in: yields ``first`` then ``rest`` forever, counting draws."""

    def __init__(self, first: list[int], rest: int) -> None:
        self.first, self.rest, self.drawn = list(first), rest, 0

    def __iter__(self):
        return self

    def __next__(self) -> int:
        self.drawn += 1
        return self.first.pop(0) if self.first else self.rest


@pytest.mark.alone  # send times asserted within 10-50 ms of the schedule
def test_closed_slot_whose_session_cannot_start_ends_instead_of_spinning():
    # Slot A replays s0 (50 short turns); slot B draws s1, whose first turn comes 5 s
    # after its start, past the 0.3 s stop.
    wl = make_workload(n_sessions=2, turns=50)
    late = wl.sessions[1]
    late.requests[0] = Request(0, late.requests[0].blocks, 40, 5, 5.0)
    clock = FakeClock(service_s=0.01)
    seq = CountingSequence([0], rest=1)
    rep = Replayer(wl, lambda t: None, clock.send, clock.now, lambda: 0.3)
    asyncio.run(rep.closed(2, seq))
    # Slot B draws s1 once and ends (a slot that redrew it in a loop that never awaited would draw ~10^5
    # times and starve slot A's in-flight request until the stop: one or two turns sent); slot A keeps its
    # turns going.
    assert seq.drawn == 2
    assert {s for s, *_ in clock.sent} == {"s0"}
    assert len(clock.sent) > 5


def test_closed_workload_of_empty_sessions_ends_at_once():
    wl = make_workload(n_sessions=2, turns=0)
    clock = FakeClock()
    seq = CountingSequence([], rest=0)
    rep = Replayer(wl, lambda t: None, clock.send, clock.now, lambda: 0.3)
    asyncio.run(rep.closed(1, seq))
    assert seq.drawn == 2 and clock.sent == [] and clock.now() < 0.3


def test_a_large_body_is_built_off_the_event_loop_and_a_small_one_on_it(tmp_path):
    """Worker.prepare: a prompt of OFF_LOOP_TOKENS or more is built on the builder thread, so the loop goes on
    (bench/loop_lag_body.py measures the loop's lag both ways); the body is the same bytes either way."""
    import threading

    from benchcamp.loadgen.replay import Turn
    from benchcamp.loadgen.worker import OFF_LOOP_TOKENS, Ctrl, Stat, Worker, WorkerPlan

    blocks = tuple(range(OFF_LOOP_TOKENS // 16 + 1))
    big = Request(0, blocks, OFF_LOOP_TOKENS, 8, 0.0)
    small = Request(0, blocks[:4], 64, 8, 0.0)
    wl = make_workload()
    plan = WorkerPlan(index=0, workers=1, label="c1", endpoint="http://127.0.0.1:9", api_key=None, model="m",
                      api="completions", workload=wl, mode="closed", records_path=str(tmp_path / "r.parquet"))
    worker = Worker(plan, [0.0] * Ctrl.N, [0.0] * Stat.N)
    threads: list[str] = []
    build = worker.build_body

    def spy(turn):
        threads.append(threading.current_thread().name)
        return build(turn)

    worker.build_body = spy  # type: ignore[method-assign]

    async def both():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        out = await worker.prepare(Turn("s", None, big, 0.0))
        during = ticks - before  # the loop ran other work while the big body was being built
        tick.cancel()
        return out, await worker.prepare(Turn("s", None, small, 0.0)), during

    big_body, small_body, during = asyncio.run(both())
    worker.builder.shutdown()
    worker.writer.close()
    assert threads[0].startswith("benchcamp-body") and threads[1] == threading.main_thread().name
    assert during > 0
    assert big_body == completions_body("m", blocks, OFF_LOOP_TOKENS, 8, wl.block_size, wl.vocab_size, 0)
    assert small_body == completions_body("m", blocks[:4], 64, 8, wl.block_size, wl.vocab_size, 0)
