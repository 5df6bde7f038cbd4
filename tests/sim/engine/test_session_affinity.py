"""Session affinity: the client's routing key pins a session (tree) to one DP rank, on the HTTP
server (real loopback server, real client) and on the virtual clock; per-replica cache hit rates
reach the summary, the point table and the report."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

from benchcamp.loadgen.body import completions_body
from benchcamp.loadgen.http_stream import Pool
from benchcamp.loadgen.scrape import delta, parse_prometheus, scrape
from benchcamp.metrics import engine_hit_rates
from benchcamp.results.table import replica_hit_table
from benchcamp.sim.clock.simulate import SimLoad, SimRun, Simulation
from benchcamp.sim.engine.core import Router
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload
from tests.sim.engine.conftest import on_python_source

DP2 = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", data_parallel_size=2,
                     max_num_seqs=64, max_num_batched_tokens=2048)


def test_router_pins_a_key_where_its_first_request_went_whatever_the_load_or_cache():
    r = Router(DP2)
    r.add_request("a0", [100], 64, 8, 0.0, key="A")       # first of A: least loaded (rank 0), pinned
    r.add_request("b0", [200], 64, 8, 0.0, key="B")       # rank 0 has work now: rank 1, pinned
    assert (r.where["a0"].rank, r.where["b0"].rank) == (0, 1)
    for i in range(1, 6):   # rank 0 gets loaded with A's requests; A still goes there
        r.add_request(f"a{i}", [100, i], 64, 8, 0.0, key="A")
    r.add_request("b1", [100, 1], 64, 8, 0.0, key="B")    # rank 0 holds a longer prefix; B stays on 1
    assert {r.where[f"a{i}"].rank for i in range(6)} == {0} and r.where["b1"].rank == 1
    r.add_request("c", [300], 64, 8, 0.0)                 # no key: the least loaded rank, as before
    assert r.where["c"].rank == 1
    assert r.pins == {"A": 0, "B": 1}


def test_http_server_routes_by_the_session_header_and_metrics_show_each_engine(start_server, eh):
    srv = start_server(*eh.base_args("--data-parallel-size", "2", "--num-gpus", "2", "--log-requests"))
    before = scrape(srv.url)

    async def go():
        pool = Pool(srv.url, None, "X-Session-ID")
        outs = []
        for turn in range(3):   # two sessions, 3 turns each, growing contexts, sent together
            reqs = []
            for s, key in enumerate(("sess-a", "sess-b")):
                blocks = tuple(range(1000 * (s + 1), 1000 * (s + 1) + 8 + 2 * turn))
                # 32 tokens out: the first session is still running when the second arrives
                body = completions_body(eh.MODEL, blocks, len(blocks) * 16, 32, 16, 32000)
                reqs.append(pool.request("/v1/completions", f"{key}:{turn}", body, 10.0, key))
            outs += await asyncio.gather(*reqs)
        pool.close()
        return outs

    outs = asyncio.run(go())
    assert all(o.error is None for o in outs), [o.error for o in outs]
    d = delta(before, scrape(srv.url))
    ranks: dict[str, set[str]] = {}
    for m in re.finditer(r"engine=(\d+) request_id=(sess-\w):", eh.wait_until(lambda: srv.output.count("sess-") >= 6
                                                                               and srv.output)):
        ranks.setdefault(m.group(2), set()).add(m.group(1))
    assert ranks == {"sess-a": {"0"}, "sess-b": {"1"}} or ranks == {"sess-a": {"1"}, "sess-b": {"0"}}
    # each session's 3 turns on its own engine: 2 of 3 turns hit their session's prefix there
    q0, q1 = d["vllm:prefix_cache_queries@engine=0"], d["vllm:prefix_cache_queries@engine=1"]
    assert q0 == q1 == (8 + 10 + 12) * 16
    rates = engine_hit_rates(d)
    assert set(rates) == {"0", "1"} and rates["0"] == rates["1"] == (8 + 10) * 16 / q0
    assert d["vllm:prefix_cache_queries"] == q0 + q1     # the all-engines sum is unchanged


def test_scrape_keeps_prefix_cache_counters_per_engine():
    text = "\n".join([
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30',
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 10',
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 40',
        'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 40',
    ])
    m = parse_prometheus(text)
    assert m["vllm:prefix_cache_hits"] == 40 and m["vllm:prefix_cache_hits@engine=1"] == 10
    assert engine_hit_rates(m) == {"0": 0.75, "1": 0.25}
    single = parse_prometheus(text.replace('engine="1"', 'engine="0"'))
    assert engine_hit_rates(single) == {}          # one engine: nothing per replica to show


def _sessions_with_subagents() -> Workload:
    """Sessions over a shared system prompt with growing contexts; every third one spawns two subagents."""
    bs, system = 16, tuple(range(1, 21))
    sessions = []
    for i in range(16):
        ctx = system + tuple(range(1000 + 100 * i, 1010 + 100 * i))
        reqs = [Request(t, ctx + tuple(range(5000 + 100 * i, 5000 + 100 * i + 3 * t)), (len(ctx) + 3 * t) * bs,
                        20 + t, 0.0 if t == 0 else 0.3) for t in range(4)]
        sessions.append(Session(f"s{i}", reqs))
        if i % 3 == 0:
            for k in range(2):
                sub = ctx + (9000 + 10 * i + k,)
                sessions.append(Session(f"s{i}-sub{k}", [Request(0, sub, len(sub) * bs, 12, 0.1)],
                                        parent=f"s{i}", parent_turn=0))
    return Workload("affinity", bs, 32000, sessions)


def _spied(sim: Simulation) -> dict:
    """key -> the ranks the router put its requests on (a spy around the real router)."""
    seen: dict = {}
    add = sim.engine.add_request

    def spy(rid, hashes, plen, out, now, external_tokens=0, key=None):
        add(rid, hashes, plen, out, now, external_tokens, key=key)
        seen.setdefault(key, set()).add(sim.engine.where[rid].rank)
    sim.engine.add_request = spy  # type: ignore[method-assign]
    return seen


@on_python_source  # it spies on the router
def test_virtual_clock_keeps_each_session_tree_on_one_rank():
    sim = Simulation(_sessions_with_subagents(), DP2, SimLoad(mode="closed", level=6, warmup_s=1.0, duration_s=20.0, drain_s=30.0, seed=3, point="c6"), SimRun())
    seen = _spied(sim)
    df = sim.run()
    assert (df.status == 200).all() and df.session_id.str.contains("-sub").any()
    assert len(seen) > 6 and None not in seen
    assert all(not k.count("-sub") for k in seen)             # subagents carry their root's key
    assert all(len(r) == 1 for r in seen.values())            # a tree never changes rank
    assert {next(iter(r)) for r in seen.values()} == {0, 1}
    assert sim.engine.pins == {k: next(iter(r)) for k, r in seen.items()}


@on_python_source  # it spies on the router
def test_virtual_clock_without_a_session_header_routes_by_load_and_cache():
    sim = Simulation(_sessions_with_subagents(), DP2, SimLoad(mode="closed", level=6, warmup_s=1.0, duration_s=20.0, drain_s=30.0, seed=3, point="c6", session_affinity=False),
                     SimRun())
    seen = _spied(sim)
    sim.run()
    assert list(seen) == [None]


def test_per_replica_hit_rates_reach_the_point_summary_table_and_report(tmp_path):
    from benchcamp.config import load_config
    from benchcamp.loadgen.spec import PointSpec
    from benchcamp.report.render import _replica_table
    from benchcamp.results.outcome import summarize_point
    from benchcamp.sim.clock.virtual_point import run_point_virtual

    cfg = load_config(None, [
        "engine.model=meta-llama/Llama-3.1-8B-Instruct", "engine.model_profile=llama-3.1-8b",
        "engine.data_parallel_size=2", "engine.max_num_seqs=64", "engine.max_num_batched_tokens=2048",
        "hardware.gpu=h100-sxm", "hardware.gpu_count=2", "load.warmup_s=1", "load.duration_s=20",
        "load.min_requests=5", "load.clock=virtual", "baselines.published=[]"])
    res = run_point_virtual(cfg, _sessions_with_subagents(), PointSpec.from_load(cfg.load, 6, "exec-a"), tmp_path)
    out = summarize_point(cfg, res)
    rates = engine_hit_rates(res.server_metrics_delta)
    assert set(rates) == {"0", "1"} and all(0 < v < 1 for v in rates.values())
    assert out.summary["cache_hit_rate_server.engine0"] == rates["0"]
    assert out.summary["cache_hit_rate_server.engine1"] == rates["1"]
    table = replica_hit_table([out])
    assert "engine 0" in table and "engine 1" in table and f"{rates['1']:.1%}" in table
    html = _replica_table([dict(out.summary, point=out.label)])
    assert "engine 1" in html and f"{rates['0']:.1%}" in html
    # one engine: no per-replica table
    single = summarize_point(cfg, res).summary
    assert replica_hit_table([SimpleNamespace(label="x", summary={k: v for k, v in single.items()
                                                                 if ".engine" not in k})]) == ""


def test_the_client_replay_gives_subagents_their_root_sessions_key():
    import time

    from benchcamp.loadgen.replay import Replayer

    wl = _sessions_with_subagents()
    sent: list = []
    t0 = time.monotonic()

    def now() -> float:   # virtual time runs 100x faster than the wall clock: the think times pass at once
        return (time.monotonic() - t0) * 100

    async def send(turn, payload):
        sent.append((turn.session_id, turn.root or turn.session_id))
        return now()

    rp = Replayer(wl, lambda t: None, send, now, lambda: 1e9)
    asyncio.run(rp.session(wl.top_level()[0], 1, 0.0))
    assert {k for _, k in sent} == {"s0~1"}
    assert {s for s, _ in sent} == {"s0~1", "s0-sub0~1", "s0-sub1~1"}


def test_a_waiting_session_builds_its_body_only_just_before_its_send():
    """10,000 sessions waiting out think times hold no bodies: each is built PREPARE_LEAD_S ahead."""
    import time

    from benchcamp.loadgen.replay import PREPARE_LEAD_S, Replayer

    wl = Workload("wait", 16, 32000, [Session("s0", [Request(0, (1,), 16, 2, 0.2), Request(1, (1, 2), 32, 2, 0.2)])])
    t0 = time.monotonic()

    def now() -> float:
        return time.monotonic() - t0

    built: list[tuple[float, float]] = []

    def prepare(turn):
        built.append((now(), turn.scheduled_s))
        return b""

    async def send(turn, payload):
        return now()

    asyncio.run(Replayer(wl, prepare, send, now, lambda: 1e9).session(wl.sessions[0], 0, 0.0))
    assert len(built) == 2
    assert all(t >= sched - PREPARE_LEAD_S for t, sched in built)
