"""AgentX turns as chat (load.api chat, load.agentx.context; benchcamp.loadgen.chat_context): a client process's
worker over real loopback HTTP against the simulated engine (one engine for the module), and the virtual clock on
the same plays. The messages' shape against the harness's own reconstruction: tests/workload/test_agentx_conformance.py."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))

from simulated_engine import simulated_engine  # noqa: E402

from benchcamp.config import AGENTX_DEFAULTS, ConfigError, from_dict  # noqa: E402
from benchcamp.loadgen.worker import Ctrl, Stat, Worker, WorkerPlan  # noqa: E402
from benchcamp.metrics import agentx_submission  # noqa: E402
from benchcamp.results.records import read_records  # noqa: E402
from benchcamp.sim.clock.simulate import SimLoad, simulate  # noqa: E402
from benchcamp.sim.engine.settings import EngineSettings  # noqa: E402
from benchcamp.workload.model import Request, Session, Workload  # noqa: E402

BS = 16
TAIL = 11  # each turn's partial last block
SETTINGS = EngineSettings(
    model="meta-llama/Llama-3.1-8B-Instruct", gpu="h200", max_num_seqs=64, max_num_batched_tokens=2048
)
# t* half way through s0's recorded time: its primer, 2 warm-ups at max_tokens=1, then the profiled turns
RULES = dict(AGENTX_DEFAULTS, start_min_ratio=0.5, start_max_ratio=0.5, warmup_requests_per_lane=2)


def workload() -> Workload:
    """One tree of 10 turns 50 ms apart, each adding 3 blocks (a 2-block answer, then the user's block and a
    partial one) after a 2-block tool + system prefix; then a second tree for the lane's next play."""

    def session(sid: str, base: int) -> Session:
        reqs = [
            Request(t, tuple(range(base, base + 4 + 3 * t)), (3 + 3 * t) * BS + TAIL, 20, 0.05 if t else 0.0)
            for t in range(10)
        ]
        return Session(sid, reqs, kind="main", fixed_blocks=2)

    return Workload("chat", BS, 32000, [session("s0", 1000), session("s1", 2000)])


@pytest.fixture(scope="module")
def engine_url():
    with simulated_engine("m") as url:
        yield url


def run_worker(url: str, tmp: Path, context: str) -> tuple[dict, dict, object]:
    """One worker process's loop, in this process, for 1.5 s: (the chat bodies it sent and the answers it kept,
    by (session, turn); its records)."""
    plan = WorkerPlan(
        index=0,
        workers=1,
        label="c1",
        endpoint=url,
        api_key=None,
        model="m",
        api="chat",
        workload=workload(),
        mode="closed",
        slots=1,
        warmup_s=0.3,
        drain_s=5.0,
        request_timeout_s=10.0,
        records_path=str(tmp / f"{context}.parquet"),
        health_path=str(tmp / f"{context}.json"),
        agentx=dict(RULES, context=context),
        level=1,
        seed=0,
    )
    ctrl, stats = [0.0] * Ctrl.N, [0.0] * Stat.N
    w = Worker(plan, ctrl, stats)
    bodies: dict = {}
    answers: dict = {}
    build, keep = w.build_body, w._keep_answer

    def spy_build(turn):  # Worker.prepare builds every body here, on the loop or on the builder thread
        body = build(turn)
        bodies[(turn.session_id, int(turn.request.turn))] = json.loads(body)
        return body

    def spy_keep(turn, text, usage):
        answers[(turn.session_id, int(turn.request.turn))] = "".join(text or [])
        keep(turn, text, usage)

    w.build_body, w._keep_answer = spy_build, spy_keep  # type: ignore[method-assign]
    ctrl[Ctrl.EPOCH], ctrl[Ctrl.STOP_AT] = time.monotonic(), 3.0
    asyncio.run(w.run())
    return bodies, answers, read_records(plan.records_path)


def _first_play(df):
    return df[~df["session_id"].str.contains("~")].set_index(["session_id", "turn"])


@pytest.mark.alone  # a 3 s window of a paced engine: on a busy box (the other xdist worker) it can hold no record
def test_live_answers_reach_the_next_turn_and_both_clocks_agree(engine_url, tmp_path):
    """context live: turn k+1's messages carry turn k's answer as the server streamed it (a 1-token answer after a
    max_tokens=1 warm-up), after turn k's messages unchanged but for the partial block the harness cuts off (the
    server's cache hits all of turn k's prompt up to it); the
    server counts exactly the prompt benchcamp expects, and the virtual clock's plays have the same prompt lengths
    and cache hits turn by turn. context recorded: the recorded answers, the recorded lengths."""
    bodies, answers, df = run_worker(engine_url, tmp_path, "live")
    assert df["error"].isna().all()
    s0 = _first_play(df).loc["s0"]
    played = sorted(s0.index)
    assert len(played) >= 5 and set(s0.loc[played[1:3], "expected_output_tokens"]) == {1}  # the warm-ups
    for p, k in zip(played, played[1:]):
        msgs = bodies[("s0", k)]["messages"]
        answer = next(m for m in reversed(msgs) if m["role"] == "assistant")
        streamed = answers[("s0", p)]
        assert streamed == " t" * int(s0.loc[p, "completion_tokens"])  # what the simulated engine streams
        assert answer["content"] == streamed and msgs[-1]["role"] == "user"
        # the prefix stays: turn k's messages, its last one up to its partial block (the harness cuts it there)
        before = bodies[("s0", p)]["messages"]
        assert msgs[: len(before) - 1] == before[:-1] and before[-1]["content"].startswith(
            msgs[len(before) - 1]["content"]
        )
        # ... and the cache hits it: every full block of turn k's prompt before its partial tail
        assert s0.loc[k, "cached_tokens"] >= (s0.loc[p, "prompt_tokens"] - TAIL) // BS * BS
    assert len(answers[("s0", played[2])]) == 2  # a warm-up's answer: one token, in the next turn's context
    assert (df["prompt_tokens"] == df["expected_prompt_tokens"]).all()  # the server counts what we expect
    assert (df["prompt_tokens"] != [workload().sessions[0].requests[0].prompt_len] * len(df)).any()

    # the virtual clock: the same plays, the answers counted by their generated tokens
    v = _first_play(
        simulate(
            workload(),
            SETTINGS,
            SimLoad(level=1, warmup_s=0.3, duration_s=1.2, drain_s=5.0, seed=0, agentx=dict(RULES, context="live")),
        )
    ).loc["s0"]
    both = sorted(set(v.index) & set(played))
    assert len(both) >= 5
    for col in ("prompt_tokens", "cached_tokens"):
        assert v.loc[both, col].tolist() == s0.loc[both, col].tolist(), col

    # context recorded: the recorded answer's words, the recorded length, whatever the server answered
    bodies, answers, df = run_worker(engine_url, tmp_path, "recorded")
    r0 = _first_play(df).loc["s0"]
    assert answers == {}  # no answer text is kept
    k = sorted(r0.index)[2]
    answer = next(m for m in reversed(bodies[("s0", k)]["messages"]) if m["role"] == "assistant")
    assert answer["content"].startswith("t") and " t " not in f" {answer['content']} "
    assert (r0["prompt_tokens"] == r0["expected_prompt_tokens"]).all()
    recorded = {r.turn: r.prompt_len for r in workload().sessions[0].requests}
    assert r0["prompt_tokens"].tolist() == [recorded[t] for t in r0.index]


def test_the_setting_its_validity_and_where_it_shows():
    """load.agentx.context: live needs chat (one line), is an override; token ids are one too (the harness sends
    chat); the summary, the run's lines, the report and MLflow say which form the turns went in."""
    from types import SimpleNamespace

    from benchcamp.config import AgentxRules
    from benchcamp.report.render import _points_table
    from benchcamp.results.table import agentx_notes
    from benchcamp.tracking.log import _agentx_tags

    with pytest.raises(ConfigError, match="load.agentx.context=live .* set load.api=chat"):
        from_dict({"load": {"api": "completions", "agentx": {"context": "live"}}}, "t")
    # under load.agentx an unset load.api is the harness's: chat (benchcamp's own default stays token ids)
    assert from_dict({"load": {"agentx": {"context": "live"}}}, "t").load.api == "chat"
    assert from_dict({"load": {"agentx": {}}}, "t").load.api == "chat"
    assert from_dict({"load": {}}, "t").load.api == "completions"
    assert from_dict({"load": {"api": "chat", "agentx": {"context": "live"}}}, "t").load.agentx.context == "live"
    # a load.agentx at its default context keeps the fingerprint it had before the setting existed
    assert (
        from_dict({"load": {"agentx": {}}}, "t").fingerprint()
        == from_dict({"load": {"agentx": {"context": "recorded"}}}, "t").fingerprint()
    )
    ok = (0, 100, AgentxRules(), None, True, None)
    assert agentx_submission(*ok, coverage=(1, 1), api="chat")["agentx_submission_valid"] == 1
    out = agentx_submission(*ok, coverage=(1, 1), api="chat")
    assert out["agentx_prompt"] == "chat_recorded"
    ids = agentx_submission(*ok, coverage=(1, 1), api="completions")
    assert ids["agentx_prompt"] == "token_ids" and ids["agentx_submission_valid"] == 0
    assert "load.api=completions (token ids: the harness sends chat" in ids["agentx_submission_reasons"]
    live = agentx_submission(0, 100, AgentxRules(context="live"), None, True, None, coverage=(1, 1), api="chat")
    assert live["agentx_prompt"] == "chat_live" and live["agentx_submission_valid"] == 0
    assert "load.agentx.context='live' (agentx: 'recorded', locked by the harness)" in live["agentx_overrides"]
    assert _agentx_tags(live)["benchcamp.agentx_prompt"] == "chat_live"
    assert "c4: not a valid submission (agentx, chat_live)" in agentx_notes([SimpleNamespace(label="c4", summary=live)])
    html = _points_table([{"point": "c4", "level": 4, "valid": True, "reasons": [], **live}], None)
    assert "AgentX submission (agentx, chat_live)" in html
