"""The sweep's shards in the step library: config rules, and a dead shard's records on S3 (moto stands in for
S3: no AWS is reachable here) synced while its point ran, then merged by summarize's merge_shards."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from benchcamp.campaign import measure, steps
from benchcamp.campaign.handoff import Deployment, WorkloadRef
from benchcamp.campaign.layout import StoreLayout
from benchcamp.config import ConfigError, from_dict
from benchcamp.results.records import RecordWriter, empty_record, read_records, write_records
from benchcamp.results.store import open_store


def _cfg(**load):
    return from_dict({"load": {"levels": [4], "workers": 1, **load}})


@pytest.mark.parametrize(
    "load, why",
    [
        ({"shards": 2, "workers": 0}, "load.shards=2 needs load.workers >= 1"),
        ({"shards": 2, "max_requests": 10}, "load.max_requests counts on one host"),
        ({"shards": 2, "mode": "capacity"}, "load.mode=capacity runs on one host"),
    ],
)
def test_shard_rules_name_the_field(load, why):
    with pytest.raises(ConfigError, match=why):
        _cfg(**load)


def test_an_unsharded_config_keeps_its_fingerprint_and_one_host_sweeps_refuse_shards(tmp_path):
    assert _cfg().fingerprint() == _cfg(shards=1).fingerprint() != _cfg(shards=2).fingerprint()
    with pytest.raises(ConfigError, match="`benchcamp run` drives one host: set load.shards=1"):
        steps.sweep(_cfg(shards=2), open_store(str(tmp_path)), StoreLayout.for_execution("c", "e"),
                    Deployment.from_dict({"endpoint": ""}),
                    WorkloadRef(key=None, digest="", path="", name="", sessions=0, stats={}))


def _rec(worker, sent):
    return empty_record(point="c4", session_id=f"s{worker}-{sent}", worker=worker, sent_s=sent, done_s=sent + 0.1,
                        status=200)


def test_a_dead_shard_s_synced_records_are_merged_into_an_incomplete_point_on_s3(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(measure, "SHARD_SYNC_S", 0.0)  # read where the sweep runs
    cfg, layout = _cfg(shards=2), StoreLayout.for_execution("camp", "e1")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        store = open_store("s3://bench/prefix", client=s3)
        done = tmp_path / "shard-0"  # shard 0 finished its point: its folder went to the store at the end
        write_records([_rec(0, 1.0)], done / "records.parquet")
        (done / "point.json").write_text(json.dumps({"label": "c4", "window": [10.0, 50.0], "aborted": None,
                                                    "shard": {"index": 0}}))
        store.put_dir(done, layout.shard("c4", 0))
        dead = tmp_path / "shard-1"  # shard 1's host died mid-point: only what its syncs uploaded is there
        w = RecordWriter(dead / "records.T.w0.parquet", flush_every=1)
        w.write(_rec(1, 1.5))
        measure._synced(None, store, dead, layout.shard("c4", 1))({"t": 1.0})  # the poll loop's callback
        w.write(_rec(1, 2.5))  # flushed after the last sync: lost with the host

        assert steps.merge_shards(cfg, store, layout, tmp_path / "merge") == ["c4"]
        doc = json.loads(store.get_text(layout.point_json("c4")))
        assert doc["abort_kind"] == "incomplete" and "shard 1 (1 flushed records kept)" in doc["aborted"]
        merged = read_records(store.get_file(layout.records("c4"), tmp_path / "got.parquet"))
        assert list(merged["sent_s"]) == [1.0, 1.5] and doc["requests"] == 2
        assert steps.merge_shards(cfg, store, layout, tmp_path / "again") == []  # merged once, left as it is
        w.close()
