"""benchcamp.campaign.handoff: each object a step hands to the next survives XCom's JSON (to_dict, json.dumps
with NaN refused, json.loads, from_dict) as the same object, and its JSON is the dict the step returned before
it was typed, a provider's or deploy's own keys included."""

from __future__ import annotations

import json
import math

import pytest

from benchcamp.campaign.handoff import (
    Deployment,
    EngineHandle,
    EngineProcess,
    Evaluation,
    Judgement,
    Node,
    Summary,
    WorkloadRef,
)
from benchcamp.campaign.kinds import Status
from benchcamp.errors import ExitCode


def _over_xcom(doc: dict) -> dict:
    return json.loads(json.dumps(doc, allow_nan=False))  # XCom refuses NaN: so does this


EC2_CLUSTER_NODE = {
    "kind": "ec2",
    "host": "10.0.0.5",
    "node_id": "i-0abc",
    "meta": {
        "execution_id": "nightly-1",
        "instance_type": "p5.48xlarge",
        "zone": "us-east-1a",
        "region": "us-east-1",
        "expires_at": None,  # a key with a null value stays a key with a null value
        "cluster": [{"node_id": "i-0abc", "host": "10.0.0.5", "index": 0, "role": "unified", "instance": 0,
                     "node": 0}],
        "placement_group": "benchcamp-nightly-1",
    },
}
SLURM_NODE = {
    "kind": "slurm",
    "host": "127.0.0.1",
    "node_id": "42",
    "meta": {"execution_id": "e", "job_id": "42", "job_name": "benchcamp-e", "nodes": ["n1"], "partition": "gpu",
             "expires_at": "2026-12-06T10:00:00+00:00", "log_path": "/shared/e.log"},
}
TOPOLOGY_DEPLOYMENT = {
    "endpoint": "http://127.0.0.1:8001",
    "api_key_ref": "engine-env:123:1700000000.25",
    "log_path": "/tmp/e/router.log",
    "handle": {
        "kind": "local", "pid": 123, "create_time": 1700000000.25, "argv": ["benchcamp", "router"],
        "engine": "vllm", "fingerprint": "abc", "version": None, "execution_id": "e", "scratch": ["/tmp/e/w0"],
        "peers": [{"pid": 124, "create_time": 1700000001.5, "log_path": "/tmp/e/prefill-0.log", "name": "prefill-0",
                   "role": "prefill", "instance": 0, "node": 0, "head": True, "endpoint": None}],
        "topology": "1P1D", "name": "router", "role": "router",
        "capabilities": {"max_model_len": 4096, "logprobs": True},
    },
    "model": "tiny",
}
SLURM_DEPLOYMENT = {
    "endpoint": "http://127.0.0.1:8000", "api_key_ref": "slurm:e", "log_path": "/shared/e.log",
    "handle": {"kind": "slurm", "node_id": "42", "job_id": "42", "engine": "vllm", "fingerprint": "abc",
               "version": "0.11.0", "execution_id": "e"},
    "model": "tiny",
}
EC2_ROUTER_DEPLOYMENT = {
    "endpoint": "http://127.0.0.1:9000", "api_key_ref": "ec2:e", "log_path": "/tmp/router.log",
    "handle": {"kind": "ec2", "node_id": "i-0abc", "engine": "vllm", "fingerprint": "abc", "version": "0.11.0",
               "router": {"pid": 7, "create_time": 1.5, "log_path": "/tmp/router.log"}},
    "model": "tiny",
}


@pytest.mark.parametrize("doc", [EC2_CLUSTER_NODE, SLURM_NODE], ids=["ec2-cluster", "slurm"])
def test_a_node_keeps_its_providers_own_keys(doc):
    node = Node.from_dict(_over_xcom(doc))
    assert node.execution_id == doc["meta"]["execution_id"]
    assert node.to_dict() == doc and Node.from_dict(_over_xcom(node.to_dict())) == node
    assert set(node.extra) == set(doc["meta"]) - {"execution_id"}
    assert node.provider_node().meta == doc["meta"]


@pytest.mark.parametrize("doc", [TOPOLOGY_DEPLOYMENT, SLURM_DEPLOYMENT, EC2_ROUTER_DEPLOYMENT],
                         ids=["local-topology", "slurm", "ec2-router"])
def test_a_deployment_round_trips_with_its_handle_typed(doc):
    dep = Deployment.from_dict(_over_xcom(doc))
    assert dep.to_dict() == doc and Deployment.from_dict(_over_xcom(dep.to_dict())) == dep
    assert "api_key" not in dep.to_dict()
    assert dep.engine_deployment().to_dict() == doc  # deploy's own Deployment reads the same JSON


def test_the_handle_fields_say_what_the_teardown_reads():
    dep = Deployment.from_dict(TOPOLOGY_DEPLOYMENT)
    assert dep.handle.kind == "local" and dep.handle.pid == 123 and dep.handle.topology == "1P1D"
    assert dep.handle.peers == (EngineProcess(pid=124, create_time=1700000001.5, log_path="/tmp/e/prefill-0.log",
                                              name="prefill-0", role="prefill", instance=0, node=0, head=True,
                                              extra={"endpoint": None}),)
    assert dep.handle.extra == {"version": None}  # null where a str is expected: kept as it came
    assert Deployment.from_dict(SLURM_DEPLOYMENT).handle.job_id == "42"
    assert Deployment.from_dict(EC2_ROUTER_DEPLOYMENT).handle.router == EngineProcess(7, 1.5, "/tmp/router.log")


def test_unknown_handle_and_peer_keys_are_kept():
    doc = {"endpoint": "", "api_key_ref": None, "log_path": None, "model": "m",
           "handle": {"kind": "local", "engine": "vllm", "gpu_uuid": "GPU-1", "peers": [{"pid": 1, "numa": 0}]}}
    dep = Deployment.from_dict(_over_xcom(doc))
    assert dep.handle.extra == {"gpu_uuid": "GPU-1"} and dep.handle.peers == (EngineProcess(pid=1, extra={"numa": 0}),)
    assert dep.to_dict() == doc
    bare = {"endpoint": "http://127.0.0.1:9", "handle": {"kind": "local", "pid": 5}}  # a handle built by hand
    assert Deployment.from_dict(bare).handle.to_dict() == bare["handle"]


def test_the_virtual_deployment_is_the_dict_it_was():
    dep = Deployment("", None, None, "tiny", EngineHandle(kind="virtual", engine="simulated"))
    assert dep.to_dict() == {"endpoint": "", "api_key_ref": None, "log_path": None,
                             "handle": {"kind": "virtual", "engine": "simulated"}, "model": "tiny"}
    assert Deployment.from_dict(_over_xcom(dep.to_dict())) == dep


def test_a_workload_reference_round_trips_published_or_not():
    for key in ("tiny/workloads/abc.parquet", None):
        doc = {"key": key, "digest": "abc", "path": "/w/wl.parquet", "name": "tiny", "sessions": 3,
               "stats": {"theoretical_hit_rate": 0.5, "requests": 12, "source": "synthetic"}}
        ref = WorkloadRef.from_dict(_over_xcom(doc))
        assert ref.to_dict() == doc and ref.theoretical_hit_rate == 0.5 and ref.key == key
    assert WorkloadRef("k", "d", "p", "n", 0, {}).theoretical_hit_rate is None


def test_a_summary_with_a_nan_figure_goes_through_xcom_as_null():
    summary = Summary(
        status=Status.OK,
        headline={"point": "c2", "valid": True, "total_tokens_per_s_per_gpu": 812.5,
                  "cache_hit_rate_server.engine1": math.nan, "ttft_p90_s": math.inf},
        points=("c1", "c2"),
    )
    doc = _over_xcom(summary.to_dict())
    assert doc == {"status": "ok", "error": None, "headline": {"point": "c2", "valid": True,
                   "total_tokens_per_s_per_gpu": 812.5, "cache_hit_rate_server.engine1": None, "ttft_p90_s": None},
                   "points": ["c1", "c2"], "missing_points": [], "interrupted": False}
    back = Summary.from_dict(doc)
    assert back.status is Status.OK and back.points == ("c1", "c2") and back.headline["ttft_p90_s"] is None
    assert back.to_dict() == doc and Summary.from_dict(_over_xcom(back.to_dict())) == back


def test_a_summary_reads_summary_json_and_the_old_status_rule():
    stored = {"status": "failed", "error": "sweep: boom", "headline": {}, "interrupted": False,
              "missing_points": ["c3"], "points": [{"point": "c2", "valid": False}], "campaign": "tiny"}
    summary = Summary.from_dict(stored)
    assert summary == Summary(Status.FAILED, "sweep: boom", {}, ("c2",), ("c3",), False)
    assert Summary.from_dict({"error": "x"}).status is Status.FAILED and Summary.from_dict({}).status is Status.OK


def test_an_evaluation_and_a_judgement_round_trip():
    evaluation = Evaluation(regressed=True, verdict_count=4, notes=("no history",), report="/r/index.html",
                            mlflow_run_id=None)
    doc = _over_xcom(evaluation.to_dict())
    assert doc == {"regressed": True, "verdicts": 4, "notes": ["no history"], "report": "/r/index.html",
                   "mlflow_run_id": None}
    assert Evaluation.from_dict(doc) == evaluation
    judged = Judgement(ExitCode.OK, status="ok", headline={"point": "c2", "ttft_p90_s": math.nan})
    doc = _over_xcom(judged.to_dict())
    assert doc == {"exit_code": 0, "status": "ok", "headline": {"point": "c2", "ttft_p90_s": None}}
    assert Judgement.from_dict(doc) == Judgement(ExitCode.OK, "ok", {"point": "c2", "ttft_p90_s": None})
    assert Judgement(ExitCode.FAILED).to_dict() == {"exit_code": 1}  # no summary.json: the code alone
    assert Judgement.from_dict({"exit_code": 1}) == Judgement(ExitCode.FAILED)


def test_a_matrix_item_crosses_xcom_and_rebuilds_its_config():
    """What resolve_config hands every task of an engine group: the form's matrix entry resolved against
    params.yaml, then JSON, then the same item, whose config rebuilds with the fingerprint it was given."""
    from benchcamp.campaign.form import resolve_items
    from benchcamp.campaign.handoff import MatrixItem

    base, tuned = resolve_items({"matrix": [{}, {"engine.max_num_seqs": 64}]}, "benchcamp_campaign", "manual__x")
    for item in (base, tuned):
        back = MatrixItem.from_dict(_over_xcom(item.to_dict()))
        assert back == item and back.resolved().fingerprint() == item.fingerprint
    assert tuned.label == "matrix[1] {'engine.max_num_seqs': 64}" and base.label == "matrix[0] (base)"
    assert tuned.resolved().engine.max_num_seqs == 64 and base.layout.execution_id != tuned.layout.execution_id
