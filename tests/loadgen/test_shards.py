"""One point from several client hosts (benchcamp.loadgen.shards): the split, the barrier, the merge; and
two shards of one point run for real over loopback HTTP (two threads of this process stand for two hosts)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from loadgen_support import MODEL, make_workload

from benchcamp.loadgen import PointSpec, run_point
from benchcamp.loadgen.outcome import AbortKind
from benchcamp.loadgen.shards import (
    BarrierTimeout,
    Shard,
    merge_shard_points,
    rendezvous,
    shard_workers,
)
from benchcamp.loadgen.sweep import PointTarget, _plans
from benchcamp.results.records import RecordWriter, empty_record, read_records, write_records


def test_shards_cut_the_workers_in_contiguous_even_slices():
    for total, shards in ((8, 2), (7, 3), (5, 5)):
        slices = [shard_workers(total, shards, k) for k in range(shards)]
        assert [i for s in slices for i in s] == list(range(total))
        assert max(map(len, slices)) - min(map(len, slices)) <= 1
    with pytest.raises(ValueError, match="load.shards=3 exceeds the point's 2 client processes"):
        shard_workers(2, 3, 0)


@pytest.mark.parametrize("mode, level", [("closed", 7), ("open", 3.0)])
def test_the_shards_plans_together_are_the_one_host_plan(tmp_path, mode, level):
    wl = make_workload(n_sessions=12)
    def target(workers):
        return PointTarget("http://x", None, MODEL, wl, PointSpec("p", mode, level, 0.5, 2.0, workers=workers, seed=3),
                           tmp_path)

    one = _plans(target(6), "t")
    split = [p for k in range(3) for p in _plans(target(2), "t", Shard(k, 3, barrier=lambda meta, tick: 0.0))]
    assert [p.global_index for p in split] == [p.global_index for p in one] == list(range(6))
    assert [(p.slots, p.starts, p.global_workers) for p in split] == [(p.slots, p.starts, 6) for p in one]
    assert [p.index for p in split] == [0, 1] * 3 and {p.workers for p in split} == {2}  # per host: stats slots


def _dict_barrier(board: dict, timeout_s: float = 10.0, quit_reason=lambda: None):
    def barrier(k, count):
        return rendezvous(k, count, {"host": f"h{k}"}, board.__setitem__, board.get, timeout_s,
                          quit_reason=quit_reason, poll_s=0.01)
    return barrier


def test_every_shard_gets_the_same_start_the_last_ready_time_plus_the_margin():
    board: dict = {}
    out: dict = {}
    barrier = _dict_barrier(board)

    def shard(k, delay):
        time.sleep(delay)
        out[k] = barrier(k, 2)

    threads = [threading.Thread(target=shard, args=(k, 0.2 * k)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    (start0, metas), (start1, _) = out[0], out[1]
    assert start0 == start1 == max(m["ready_wall"] for m in metas) + 2.0
    assert [m["host"] for m in metas] == ["h0", "h1"]


def test_a_shard_that_never_comes_is_named_and_a_shard_that_quit_ends_the_wait_at_once():
    with pytest.raises(BarrierTimeout, match=r"shard\(s\) \[1\] did not reach the point's barrier in 0.2 s"):
        _dict_barrier({}, timeout_s=0.2)(0, 2)
    t0 = time.monotonic()
    with pytest.raises(BarrierTimeout, match="another shard gave up on the sweep \\(engine died\\)"):
        _dict_barrier({}, timeout_s=60, quit_reason=lambda: "engine died")(0, 2)
    assert time.monotonic() - t0 < 5
    stale = {1: json.dumps({"shard": 1, "ready_wall": time.time() - 100})}  # an earlier attempt's
    with pytest.raises(BarrierTimeout, match=r"\[1\]"):
        _dict_barrier(stale, timeout_s=0.2)(0, 2)


def _rec(worker, sent):
    return empty_record(point="c4", session_id=f"s{worker}-{sent}", worker=worker, sent_s=sent, first_token_s=sent + 0.1,
                        last_token_s=sent + 0.2, done_s=sent + 0.2, chunks=2, prompt_tokens=10, completion_tokens=2,
                        status=200)


def test_a_dead_shard_makes_the_point_incomplete_and_its_flushed_records_are_merged(tmp_path):
    done, dead = tmp_path / "shard-0", tmp_path / "shard-1"
    write_records([_rec(0, 1.0), _rec(0, 2.0)], done / "records.parquet")
    (done / "point.json").write_text(json.dumps({
        "label": "c4", "window": [0.5, 3.0], "aborted": None, "requests": 2, "shard": {"index": 0, "host": "a"},
        "client_health": {"workers": 1, "cpu_max": 0.2, "connections_opened": 3}, "server_metrics_delta": {"x": 1}}))
    w = RecordWriter(dead / "records.T1.w0.parquet", flush_every=1)  # killed: a stream never closed
    w.write(_rec(1, 1.5))
    w.write(_rec(1, 2.5))
    doc = merge_shard_points([done, dead], tmp_path, "c4", 4.0, (0.5, 3.0))

    merged = read_records(tmp_path / "records.parquet")
    assert list(merged["sent_s"]) == [1.0, 1.5, 2.0, 2.5] and doc["requests"] == 4
    assert AbortKind.of(doc["aborted"]) is AbortKind.INCOMPLETE and doc["abort_kind"] == "incomplete"
    assert "1 of 2 load-generator shards wrote no result: shard 1 (2 flushed records kept)" in doc["aborted"]
    assert doc["shards"] == [{"index": 0, "host": "a", "wrote_result": True}, {"index": 1, "wrote_result": False}]
    assert doc["window"] == [0.5, 3.0] and doc["server_metrics_delta"] == {"x": 1}
    assert (done / "records.parquet").exists() and (dead / "records.T1.w0.parquet.partial.arrows").exists()  # kept
    w.close()


def test_two_shards_of_a_point_start_together_and_merge_to_every_worker_s_records(server, tmp_path):
    """Two shards (threads here; hosts in the DAG) of a closed-loop c4 point, one worker each."""
    wl = make_workload(n_sessions=8, turns=2, output_len=4)
    spec = PointSpec("c4", "closed", 4, warmup_s=0.2, duration_s=1.5, drain_s=3.0, request_timeout_s=5.0, workers=1)
    board: dict = {}

    def barrier_of(k):
        def barrier(meta, tick):
            return rendezvous(k, 2, meta, board.__setitem__, board.get, 30.0, tick, margin_s=0.5, poll_s=0.01)[0]
        return barrier

    results: dict = {}

    def shard(k):
        results[k] = run_point(server.url, None, MODEL, wl, spec, tmp_path / f"shard-{k}",
                               shard=Shard(k, 2, barrier_of(k)))

    threads = [threading.Thread(target=shard, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [0, 1] and all(r.aborted is None for r in results.values())
    metas = [json.loads((tmp_path / f"shard-{k}" / "point.json").read_text())["shard"] for k in range(2)]
    assert metas[0]["start_wall"] == metas[1]["start_wall"] and all(m["late_s"] <= 0.5 for m in metas)
    assert [m["workers"] for m in metas] == [[0], [1]]
    assert all(m["clock"]["offset_s"] is not None and abs(m["clock"]["offset_s"]) < 1.5 for m in metas)

    doc = merge_shard_points([tmp_path / "shard-0", tmp_path / "shard-1"], tmp_path, "c4", 4.0, (0.2, 1.7))
    merged = read_records(tmp_path / "records.parquet")
    assert doc["aborted"] is None and len(merged) == sum(r.requests for r in results.values())
    assert sorted(merged["worker"].unique()) == [0, 1]  # global worker ids: the shards' slices
    assert merged.groupby(["session_id", "turn"]).size().max() == 1  # no session replayed by both shards
    assert doc["client_health"]["workers"] == 2 and doc["client_health"]["shards"] == 2
