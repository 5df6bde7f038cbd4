"""EC2 provider and reaper against moto (AWS is unreachable here; every test name says moto)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import ClientError

from benchcamp.config import load_config
from benchcamp.deploy.remote import engine_command, node_boot, user_data
from benchcamp.provision import ProvisionError, get_provider
from benchcamp.provision.ec2 import (
    TAG_CAMPAIGN,
    TAG_EXECUTION,
    TAG_EXPIRES,
    TAG_OWNER,
    Ec2Provider,
    client_token,
)
from benchcamp.provision.ec2_secrets import parameter_name
from benchcamp.provision.reaper import reap

REGION = "us-east-1"
# One of moto's built-in AMIs (describe_images over all of them takes seconds).
MOTO_AMI = "ami-12c6146b"


def _cfg(client, **over):
    ami = MOTO_AMI
    base = {"provider.kind": "ec2", "provider.ec2.ami_id": ami, "provider.ec2.region": REGION,
            "provider.ec2.orchestrator_cidr": "10.1.2.3/32", "provider.ec2.instance_types": ["p5en.48xlarge"],
            "provider.ec2.instance_profile": "benchcamp-engine"}
    base.update(over)
    return load_config(None, base)


def _provider(client, cfg):
    p = get_provider(cfg, boot=node_boot(cfg), client=client, waiter_delay_s=1)
    assert isinstance(p, Ec2Provider)
    return p


def _live(client):
    res = client.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    return [i for r in res["Reservations"] for i in r["Instances"]]


def test_moto_launch_has_tags_imdsv2_no_public_ip_and_restricted_security_group(ec2, instance_profile):
    cfg = _cfg(ec2)
    node = _provider(ec2, cfg).provision("run-1")
    inst = ec2.describe_instances(InstanceIds=[node.node_id])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert tags[TAG_CAMPAIGN] == cfg.campaign.name and tags[TAG_EXECUTION] == "run-1"
    assert tags[TAG_OWNER] == "benchcamp" and tags["Name"].startswith("benchcamp-")
    expiry = datetime.fromisoformat(tags[TAG_EXPIRES])
    assert timedelta(hours=5.9) < expiry - datetime.now(UTC) <= timedelta(hours=6)
    assert inst["MetadataOptions"]["HttpTokens"] == "required"  # moto's default is optional
    assert "PublicIpAddress" not in inst
    assert node.host == inst["PrivateIpAddress"]
    groups = inst["SecurityGroups"] or inst["NetworkInterfaces"][0]["Groups"]
    sg_id = groups[0]["GroupId"]
    perms = ec2.describe_security_groups(GroupIds=[sg_id])["SecurityGroups"][0]["IpPermissions"]
    assert [(p["FromPort"], p["ToPort"], [r["CidrIp"] for r in p["IpRanges"]]) for p in perms] == \
        [(8000, 8000, ["10.1.2.3/32"])]


HF_TOKEN = "hf_planted_ec2_token_0123456789"


def _user_data(ec2, node) -> str:
    raw = ec2.describe_instance_attribute(InstanceId=node.node_id, Attribute="userData")["UserData"]["Value"]
    return base64.b64decode(raw).decode()


def test_moto_secrets_go_to_ssm_securestring_not_user_data(ec2, instance_profile):
    cfg = _cfg(ec2, **{"engine.extra_args": ["--hf-token", HF_TOKEN, "--seed", "1"]})
    p = _provider(ec2, cfg)
    node = p.provision("run-ud")
    script = _user_data(ec2, node)
    key = p.api_key_for(node)
    assert len(key) >= 40
    assert key not in script and HF_TOKEN not in script and "--hf-token" not in script
    name = parameter_name("run-ud")
    assert f"aws ssm get-parameter --region {REGION} --name {name} --with-decryption" in script
    ssm = boto3.client("ssm", region_name=REGION)
    meta = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])["Parameters"]
    assert [m["Type"] for m in meta] == ["SecureString"]
    value = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
    assert value.splitlines() == [f"HF_TOKEN={HF_TOKEN}", f"VLLM_API_KEY={key}"]
    inst = ec2.describe_instances(InstanceIds=[node.node_id])["Reservations"][0]["Instances"][0]
    assert inst["IamInstanceProfile"]["Arn"].endswith(f"instance-profile/{instance_profile}")
    assert "vllm/vllm-openai:v0.33.0" in script and "--env-file /etc/benchcamp/engine.env" in script
    assert "chmod 600 /etc/benchcamp/engine.env" in script and "set -x" not in script.replace("`set -x`", "")
    docker_line = next(line for line in script.splitlines() if line.startswith("docker run"))
    assert "--api-key" not in docker_line and docker_line.endswith("--seed 1")
    assert "--tensor-parallel-size 1 --data-parallel-size 8" in docker_line and "--host 0.0.0.0" in docker_line


def test_moto_deprovision_deletes_the_ssm_parameter(ec2, instance_profile):
    cfg = _cfg(ec2)
    p = _provider(ec2, cfg)
    node = p.provision("run-del")
    ssm = boto3.client("ssm", region_name=REGION)
    assert ssm.get_parameter(Name=parameter_name("run-del"))["Parameter"]["Type"] == "SecureString"
    p.deprovision(node)
    with pytest.raises(ClientError, match="ParameterNotFound"):
        ssm.get_parameter(Name=parameter_name("run-del"))
    p.deprovision(node)  # idempotent


def test_moto_ssm_without_an_instance_profile_names_the_field_and_launches_nothing(ec2):
    cfg = _cfg(ec2, **{"provider.ec2.instance_profile": ""})
    with pytest.raises(ProvisionError, match="provider.ec2.instance_profile: required with secrets_via=ssm"):
        _provider(ec2, cfg).provision("run-noprof")
    assert _live(ec2) == []


def test_moto_secrets_via_userdata_warns_and_keeps_the_key_out_of_argv(ec2, caplog):
    cfg = _cfg(ec2, **{"provider.ec2.secrets_via": "userdata", "provider.ec2.instance_profile": "",
                       "engine.extra_args": [f"--hf-token={HF_TOKEN}"]})
    p = _provider(ec2, cfg)
    with caplog.at_level("WARNING", logger="benchcamp.provision.ec2"):
        node = p.provision("run-udmode")
    assert any("secrets_via=userdata" in r.getMessage() and "HF token" in r.getMessage() for r in caplog.records)
    script = _user_data(ec2, node)
    key = p.api_key_for(node)
    assert f"VLLM_API_KEY={key}" in script and f"HF_TOKEN={HF_TOKEN}" in script
    docker_line = next(line for line in script.splitlines() if line.startswith("docker run"))
    assert key not in docker_line and HF_TOKEN not in docker_line
    assert boto3.client("ssm", region_name=REGION).describe_parameters()["Parameters"] == []


def test_moto_pip_install_user_data_pins_the_version():
    cfg = load_config(None, {"provider.kind": "ec2", "provider.ec2.install": "pip", "engine.version": "0.11.2"})
    argv, _ = engine_command(cfg)
    script = user_data(cfg, argv, parameter="/benchcamp/engine-env/x")
    assert "pip install --quiet vllm==0.11.2" in script
    assert "EnvironmentFile=/etc/benchcamp/engine.env" in script and "/opt/vllm/bin/vllm serve" in script


def test_moto_retry_reuses_the_node_of_the_same_execution(ec2, instance_profile):
    cfg = _cfg(ec2)
    first = _provider(ec2, cfg).provision("run-retry")
    second = _provider(ec2, cfg).provision("run-retry")  # a fresh provider, as in an Airflow retry
    assert second.node_id == first.node_id
    assert [i["InstanceId"] for i in _live(ec2)] == [first.node_id]
    other = _provider(ec2, cfg).provision("run-other")
    assert other.node_id != first.node_id and len(_live(ec2)) == 2


def _fail_first_calls(client, n, code="InsufficientInstanceCapacity"):
    """Wrap run_instances so its first n calls raise ``code`` (moto cannot simulate capacity)."""
    real = client.run_instances
    calls = []

    def run_instances(**kw):
        calls.append((kw["InstanceType"], kw.get("Placement", {}).get("AvailabilityZone"), kw["ClientToken"]))
        if len(calls) <= n:
            raise ClientError({"Error": {"Code": code, "Message": "no capacity (injected)"}}, "RunInstances")
        return real(**kw)

    client.run_instances = run_instances
    return calls


def test_moto_capacity_fallback_injected_error_tries_types_then_zones(ec2, instance_profile):
    cfg = _cfg(ec2, **{"provider.ec2.instance_types": ["p5en.48xlarge", "p5e.48xlarge"],
                       "provider.ec2.availability_zones": ["us-east-1a", "us-east-1b"]})
    calls = _fail_first_calls(ec2, 3)
    node = _provider(ec2, cfg).provision("run-cap")
    assert [c[:2] for c in calls] == [("p5en.48xlarge", "us-east-1a"), ("p5en.48xlarge", "us-east-1b"),
                                      ("p5e.48xlarge", "us-east-1a"), ("p5e.48xlarge", "us-east-1b")]
    assert len({c[2] for c in calls}) == 4  # one client token per candidate
    assert calls[0][2] == client_token("run-cap", "p5en.48xlarge", "us-east-1a")
    assert node.meta["instance_type"] == "p5e.48xlarge" and node.meta["zone"] == "us-east-1b"


def test_moto_capacity_exhausted_injected_error_names_the_fix_and_launches_nothing(ec2, instance_profile):
    cfg = _cfg(ec2)
    _fail_first_calls(ec2, 99)
    with pytest.raises(ProvisionError, match="provider.ec2.instance_types"):
        _provider(ec2, cfg).provision("run-none")
    assert _live(ec2) == []


def test_moto_failure_after_launch_terminates_the_node(ec2, instance_profile, monkeypatch):
    cfg = _cfg(ec2)
    p = _provider(ec2, cfg)

    def broken_wait(inst_id):
        raise RuntimeError("waiter exploded (injected)")

    monkeypatch.setattr(p, "_wait_running", broken_wait)
    with pytest.raises(RuntimeError, match="injected"):
        p.provision("run-broken")
    assert _live(ec2) == []


def test_moto_deprovision_terminates_and_waits(ec2, instance_profile):
    cfg = _cfg(ec2)
    p = _provider(ec2, cfg)
    node = p.provision("run-term")
    p.deprovision(node)
    state = ec2.describe_instances(InstanceIds=[node.node_id])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "terminated"
    p.deprovision(node)  # idempotent: a retried teardown is harmless


def test_moto_missing_ami_is_a_clear_error(ec2, instance_profile):
    cfg = _cfg(ec2, **{"provider.ec2.ami_id": ""})
    with pytest.raises(ProvisionError, match="provider.ec2.ami_id"):
        _provider(ec2, cfg).provision("run-x")


def test_moto_reaper_terminates_only_expired_benchcamp_nodes(ec2, instance_profile):
    cfg = _cfg(ec2)
    p = _provider(ec2, cfg)
    expired = p.provision("run-old")
    fresh = p.provision("run-new")
    ec2.create_tags(Resources=[expired.node_id], Tags=[{"Key": TAG_EXPIRES, "Value": "2020-01-01T00:00:00+00:00"}])
    ami = cfg.provider.ec2.ami_id
    # Someone else's instance with an expiry-looking tag but no benchcamp execution tag.
    foreign = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, TagSpecifications=[{
        "ResourceType": "instance", "Tags": [{"Key": TAG_EXPIRES, "Value": "2020-01-01T00:00:00+00:00"}]}]
    )["Instances"][0]["InstanceId"]
    dry = reap(ec2, dry_run=True, waiter_delay_s=1)
    assert [r.instance_id for r in dry] == [expired.node_id]
    assert len(_live(ec2)) == 3
    ssm = boto3.client("ssm", region_name=REGION)
    # A parameter left by a launch that failed, past its own expiry.
    ssm.put_parameter(Name=parameter_name("run-failed"), Value="VLLM_API_KEY=x", Type="SecureString",
                      Tags=[{"Key": TAG_EXPIRES, "Value": "2020-01-01T00:00:00+00:00"}])
    reap(ec2, dry_run=True, waiter_delay_s=1)
    assert len(ssm.describe_parameters()["Parameters"]) == 3  # a dry run deletes nothing
    done = reap(ec2, waiter_delay_s=1)
    assert [r.instance_id for r in done] == [expired.node_id]
    assert sorted(i["InstanceId"] for i in _live(ec2)) == sorted([fresh.node_id, foreign])
    assert [m["Name"] for m in ssm.describe_parameters()["Parameters"]] == [parameter_name("run-new")]


def test_moto_reap_command_dry_run(ec2, instance_profile, capsys):
    from benchcamp.cli import main
    cfg = _cfg(ec2)
    node = _provider(ec2, cfg).provision("run-cli")
    ec2.create_tags(Resources=[node.node_id], Tags=[{"Key": TAG_EXPIRES, "Value": "2020-01-01T00:00:00+00:00"}])
    assert main(["reap", "--dry-run", "--params", "/dev/null"]) == 0
    assert f"would terminate {node.node_id}" in capsys.readouterr().out
    assert len(_live(ec2)) == 1


def test_moto_deploy_on_ec2_node_targets_private_ip_with_the_user_data_key(ec2, instance_profile):
    from benchcamp.deploy import deploy
    cfg = _cfg(ec2)
    p = _provider(ec2, cfg)
    node = p.provision("run-dep")
    dep = deploy(node, cfg)
    assert dep.endpoint == f"http://{node.host}:8000"
    assert dep.api_key == p.api_key_for(node) and dep.handle["kind"] == "ec2"
