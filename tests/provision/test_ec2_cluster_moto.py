"""The EC2 provider's multi-node path against moto (AWS is unreachable here): a 1P1D topology whose decode
engine spans 2 nodes = 3 GPU nodes in one cluster placement group, EFA interfaces, each node's role, DP ranks
and head address in its boot configuration, and every node released on every failure path.

What moto cannot model, and how the tests stand in for it:
- placement groups: moto has no CreatePlacementGroup/DeletePlacementGroup (NotImplementedError) and drops
  Placement.GroupName from the instances it runs; ``PgClient`` keeps the groups in memory and the tests check
  what run_instances was asked for, not placement semantics (one spine, capacity per group);
- EFA: moto accepts NetworkInterfaces[].InterfaceType=efa but reports a plain "interface" and has no EFA
  devices; the tests check the request (and the EFA-capable type list), not the fabric;
- capacity: moto never runs out; the tests inject InsufficientInstanceCapacity.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from benchcamp.config import load_config
from benchcamp.deploy.remote import node_boot
from benchcamp.provision import ProvisionError, get_provider
from benchcamp.provision.ec2 import EFA_INSTANCE_TYPES, TAG_EXECUTION, placement_group_name
from benchcamp.provision.ec2_secrets import parameter_name

REGION = "us-east-1"
MOTO_AMI = "ami-12c6146b"
NIXL = {"kind": "NixlConnector"}


class PgClient:
    """moto's EC2 client plus in-memory placement groups, a record of run_instances calls, injected errors."""

    def __init__(self, client: Any, fail_on: dict[int, str] | None = None) -> None:
        self._c, self.groups, self.runs = client, {}, []
        self.fail_on = dict(fail_on or {})  # run_instances call number (1-based) -> error code

    def create_placement_group(self, GroupName: str, Strategy: str, **kw: Any) -> dict:
        if GroupName in self.groups:
            raise ClientError({"Error": {"Code": "InvalidPlacementGroup.Duplicate", "Message": "exists"}},
                              "CreatePlacementGroup")
        self.groups[GroupName] = Strategy
        return {}

    def delete_placement_group(self, GroupName: str) -> dict:
        if self.groups.pop(GroupName, None) is None:
            raise ClientError({"Error": {"Code": "InvalidPlacementGroup.Unknown", "Message": "none"}},
                              "DeletePlacementGroup")
        return {}

    def run_instances(self, **kw: Any) -> dict:
        self.runs.append(kw)
        code = self.fail_on.pop(len(self.runs), None)
        if code:
            raise ClientError({"Error": {"Code": code, "Message": "injected"}}, "RunInstances")
        return self._c.run_instances(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


def _cfg(**over: Any):
    topo = {"prefill": {"data_parallel_size": 8, "kv_connector": NIXL},
            "decode": {"nodes_per_instance": 2, "data_parallel_size": 16, "kv_connector": NIXL},
            "router": {"policy": "session_affinity", "pd_disaggregation": True}}
    sets = {"provider.kind": "ec2", "provider.ec2.ami_id": MOTO_AMI, "provider.ec2.region": REGION,
            "provider.ec2.orchestrator_cidr": "10.1.2.3/32",
            "provider.ec2.instance_types": ["p5en.48xlarge", "p5.48xlarge"],
            "provider.ec2.availability_zones": ["us-east-1a"],
            "provider.ec2.instance_profile": "benchcamp-engine", "hardware.gpu_count": 24,
            "topology": topo} | over
    return load_config(None, sets)


def _live(client) -> list[dict]:
    res = client.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [i for r in res["Reservations"] for i in r["Instances"]]


def _script(run: dict) -> str:
    ud = run["UserData"]
    return ud if ud.startswith("#!") else base64.b64decode(ud).decode()


def _node_file(script: str) -> dict:
    return json.loads(re.search(r"<<'BENCHCAMP_NODE'\n(.*?)\nBENCHCAMP_NODE", script, re.S).group(1))


def _ssm_has(name: str) -> bool:
    try:
        boto3.client("ssm", region_name=REGION).get_parameter(Name=name)
        return True
    except ClientError:
        return False


def test_moto_cluster_nodes_share_a_placement_group_efa_and_their_heads_address(ec2, instance_profile):
    client = PgClient(ec2)
    cfg = _cfg()
    provider = get_provider(cfg, boot=node_boot(cfg), client=client, waiter_delay_s=1)
    node = provider.provision("pd-1")
    group = placement_group_name("pd-1")
    assert client.groups == {group: "cluster"}
    assert len(_live(ec2)) == 3 and len(client.runs) == 3
    for run in client.runs:  # one group, one zone, one type, an EFA interface in the group admitting itself
        assert run["Placement"] == {"GroupName": group, "AvailabilityZone": "us-east-1a"}
        assert run["InstanceType"] == "p5en.48xlarge" and run["NetworkInterfaces"][0]["InterfaceType"] == "efa"
    sg = client.runs[0]["NetworkInterfaces"][0]["Groups"][0]
    perms = ec2.describe_security_groups(GroupIds=[sg])["SecurityGroups"][0]["IpPermissions"]
    assert any(p["IpProtocol"] == "-1" and p["UserIdGroupPairs"][0]["GroupId"] == sg for p in perms)
    # heads first (prefill, decode), then the decode's second node, pointed at its head's private address
    scripts = [_script(r) for r in client.runs]
    nodes = [_node_file(s) for s in scripts]
    assert [(n["role"], n["node"], n["data_parallel_start_rank"], n["data_parallel_size_local"]) for n in nodes] == [
        ("prefill", 0, 0, 8), ("decode", 0, 0, 8), ("decode", 1, 8, 8)]
    decode_head = next(i for i in _live(ec2) if {"Key": "benchcamp:node", "Value": "1 decode 0 0"} in i["Tags"])
    assert nodes[2]["head_address"] == decode_head["PrivateIpAddress"]
    assert f"--data-parallel-address {decode_head['PrivateIpAddress']}" in scripts[2]
    assert "--headless --data-parallel-start-rank 8" in scripts[2]
    assert '--data-parallel-address "$BENCHCAMP_NODE_IP"' in scripts[1]  # the head coordinates at its own address
    assert "--data-parallel-size-local" not in scripts[0] and "--network host" in scripts[0]
    assert all("VLLM_API_KEY" not in s for s in scripts)  # the key is in SSM, fetched at boot
    assert [(n["role"], n["node"]) for n in node.meta["cluster"]] == [("prefill", 0), ("decode", 0), ("decode", 1)]
    assert node.node_id == node.meta["cluster"][0]["node_id"]
    # a retry of the provision step finds the same three nodes
    assert get_provider(cfg, boot=node_boot(cfg), client=client, waiter_delay_s=1).provision("pd-1").meta["cluster"] == node.meta["cluster"]
    assert len(client.runs) == 3
    provider.deprovision(node)
    assert not _live(ec2) and not client.groups and not _ssm_has(parameter_name("pd-1"))


def test_moto_a_type_without_efa_is_refused_before_anything_launches(ec2, instance_profile):
    client = PgClient(ec2)
    with pytest.raises(ProvisionError, match=r"provider.ec2.instance_types: g6e.12xlarge has no EFA"):
        get_provider(bad := _cfg(**{"provider.ec2.instance_types": ["g6e.12xlarge"]}), boot=node_boot(bad), client=client).provision("pd-2")
    assert not client.runs and not client.groups and "p5en.48xlarge" in EFA_INSTANCE_TYPES


def test_moto_no_capacity_half_way_releases_those_nodes_and_tries_the_next_type(ec2, instance_profile):
    client = PgClient(ec2, fail_on={2: "InsufficientInstanceCapacity"})  # p5en: the first node, then none
    node = get_provider(c := _cfg(), boot=node_boot(c), client=client, waiter_delay_s=1).provision("pd-3")
    live = _live(ec2)
    assert len(live) == 3 and {i["InstanceType"] for i in live} == {"p5.48xlarge"}
    first = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_EXECUTION}", "Values": ["pd-3"]},
                                            {"Name": "instance-type", "Values": ["p5en.48xlarge"]}])
    assert [i["State"]["Name"] for r in first["Reservations"] for i in r["Instances"]] == ["terminated"]
    assert len(node.meta["cluster"]) == 3


@pytest.mark.parametrize("where", ["launch", "running"])
def test_moto_a_failure_releases_every_node_the_group_and_the_secrets(ec2, instance_profile, monkeypatch, where):
    client = PgClient(ec2, fail_on={3: "UnauthorizedOperation"} if where == "launch" else {})
    provider = get_provider(c := _cfg(), boot=node_boot(c), client=client, waiter_delay_s=1)
    if where == "running":  # the third node never reaches running
        real, calls = provider._wait_running, []

        def wait(inst_id):
            calls.append(inst_id)
            if len(calls) == 3:
                raise RuntimeError("Waiter InstanceRunning failed: terminal state")
            return real(inst_id)
        monkeypatch.setattr(provider, "_wait_running", wait)
    with pytest.raises((ProvisionError, RuntimeError)):
        provider.provision("pd-4")
    assert len(client.runs) == 3  # two (or three) nodes were launched before the failure
    assert not _live(ec2) and not client.groups and not _ssm_has(parameter_name("pd-4"))


def test_moto_a_pd_cluster_is_deployed_behind_a_router_beside_the_orchestrator(ec2, instance_profile, tmp_path):
    from benchcamp.deploy import deploy, stop
    from benchcamp.deploy.local import alive

    client = PgClient(ec2)
    cfg = _cfg()
    provider = get_provider(cfg, boot=node_boot(cfg), client=client, waiter_delay_s=1)
    node = provider.provision("pd-5")
    dep = deploy(node, cfg, log_dir=tmp_path, die_with_parent=True)
    try:
        router = dep.handle["router"]
        assert alive(router) is not None and dep.endpoint.startswith("http://127.0.0.1:")
        argv = json.loads((tmp_path / "router-argv.json").read_text())["argv"]
        heads = {n["role"]: f"http://{n['host']}:{cfg.provider.ec2.engine_port}"
                 for n in node.meta["cluster"] if n["node"] == 0}
        assert argv[argv.index("--prefill") + 1] == heads["prefill"]
        assert argv[argv.index("--decode") + 1] == heads["decode"] and argv.count("--decode") == 1
    finally:
        stop(dep)
        provider.deprovision(node)
    assert alive(router) is None and not _live(ec2)
