"""The ec2 provider: one GPU instance per campaign execution, via boto3.

Retry safety (an Airflow retry must not launch a second node): before
launching, look up the execution's live instance by tag
(``benchcamp:execution-id=<id>``), else by the client token of any candidate
(the tag index can lag a fresh launch), and reuse it. Each launch passes a
``ClientToken`` derived from the execution id and the candidate (type, zone),
so EC2 itself refuses a second instance for that candidate: as the retry's
user data holds a new key, EC2 answers ``IdempotentParameterMismatch``, and
the provider then waits (short backoff) until the instance holding that token
is visible and reuses it; deploy reads its key back from its user data. A
token whose instance is already gone (terminated) moves on to the next
candidate. (moto ignores client tokens: the tests inject that answer.)

Safety nets against a forgotten node: tags ``benchcamp:expires-at`` (the
reaper terminates expired nodes), and the instance schedules its own shutdown
at the TTL with ``InstanceInitiatedShutdownBehavior=terminate``.

Hardening: IMDSv2 required, no public IP unless asked, a security group that
admits only the orchestrator's address on the engine port.

API key trade-off: the key is written by user data into a root-only env file
(``/etc/benchcamp/engine.env``, mode 600) that the engine reads; the script
never echoes it, so it is not in cloud-init's output log. It *is* readable as
user data by anyone holding ``ec2:DescribeInstanceAttribute`` on the instance
and by root on the node (and this provider reads it back from there, so a
retried deploy finds the key of the node it reuses). The key only guards a
short-lived engine on a private address behind that security group; a
stricter setup would keep it in SSM Parameter Store (SecureString) and give
the instance a role to read it, at the cost of an IAM role to manage.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shlex
import socket
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from benchcamp import secrets
from benchcamp.config import Config
from benchcamp.provision.base import Node, ProvisionError, Provider, check_execution_id

log = logging.getLogger(__name__)

TAG_CAMPAIGN = "benchcamp:campaign"
TAG_EXECUTION = "benchcamp:execution-id"
TAG_EXPIRES = "benchcamp:expires-at"
TAG_OWNER = "benchcamp:owner"
TAG_FINGERPRINT = "benchcamp:fingerprint"
LIVE_STATES = ["pending", "running"]
# Errors that mean "try another instance type or zone".
CAPACITY_ERRORS = {"InsufficientInstanceCapacity", "InsufficientHostCapacity", "Unsupported"}
# EC2's answer to a reused client token with other parameters: an earlier attempt launched this candidate.
TOKEN_IN_USE = "IdempotentParameterMismatch"
ENV_FILE = "/etc/benchcamp/engine.env"
_KEY_LINE = re.compile(r"^VLLM_API_KEY=(\S+)$", re.M)


def client_token(execution_id: str, instance_type: str, zone: str | None) -> str:
    """Idempotency token for run_instances: same execution + candidate -> same token (max 64 chars)."""
    return hashlib.sha256(f"{execution_id}|{instance_type}|{zone or ''}".encode()).hexdigest()[:64]


def expires_at(ttl_hours: float, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return (now + timedelta(hours=ttl_hours)).replace(microsecond=0).isoformat()


def orchestrator_cidr(cfg: Config) -> str:
    """The CIDR the engine port admits: the config's, or this machine's address /32."""
    if cfg.provider.ec2.orchestrator_cidr:
        return cfg.provider.ec2.orchestrator_cidr
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outbound interface
            addr = s.getsockname()[0]
    except OSError as exc:
        raise ProvisionError("provider.ec2.orchestrator_cidr: could not find this machine's address "
                             f"({exc}); set it to the orchestrator's CIDR, e.g. 10.0.1.23/32") from None
    return f"{addr}/32"


def user_data(cfg: Config, api_key: str) -> str:
    """Boot script: root-only env file with the key, then the pinned vLLM with deploy's argv."""
    from benchcamp.deploy.argv import vllm_argv

    ec2 = cfg.provider.ec2
    argv = vllm_argv(cfg, host="0.0.0.0", port=ec2.engine_port)
    from benchcamp.tracking.redact import argv_secrets
    for value in argv_secrets(argv):  # e.g. --hf-token in engine.extra_args: keep it out of errors and logs
        secrets.register(value)
    ttl_min = max(1, int(ec2.ttl_hours * 60))
    lines = [
        "#!/bin/bash",
        "# benchcamp engine node. Never `set -x` here: the key must stay out of cloud-init logs.",
        "set -euo pipefail",
        "umask 077",
        f"shutdown -h +{ttl_min} 'benchcamp TTL reached' || true  # terminates (shutdown behaviour)",
        "install -d -m 700 /etc/benchcamp",
        f"cat > {ENV_FILE} <<'BENCHCAMP_EOF'",
        f"VLLM_API_KEY={api_key}",
        "BENCHCAMP_EOF",
        f"chmod 600 {ENV_FILE}",
    ]
    if ec2.install == "container":
        image = f"{ec2.container_image}:v{cfg.engine.version}"
        # The official image's entrypoint is `vllm serve`: pass what follows it.
        lines.append("docker run -d --name benchcamp-engine --gpus all --ipc=host "
                     f"-p {ec2.engine_port}:{ec2.engine_port} --env-file {ENV_FILE} "
                     f"{shlex.quote(image)} {shlex.join(argv[2:])}")
    else:
        lines += [
            "python3 -m venv /opt/vllm",
            f"/opt/vllm/bin/pip install --quiet {shlex.quote('vllm==' + cfg.engine.version)}",
            f"systemd-run --unit benchcamp-engine --property=EnvironmentFile={ENV_FILE} "
            f"/opt/vllm/bin/{shlex.join(argv)}",
        ]
    return "\n".join(lines) + "\n"


class Ec2Provider(Provider):
    kind = "ec2"

    def __init__(self, cfg: Config, client: Any = None, waiter_delay_s: int = 15, waiter_attempts: int = 80,
                 lookup_delay_s: float = 2.0, lookup_attempts: int = 5):
        self.cfg = cfg
        self.ec2cfg = cfg.provider.ec2
        self._client = client
        self.waiter = {"Delay": waiter_delay_s, "MaxAttempts": waiter_attempts}
        # Finding the instance behind a reused client token: delays 2, 4, 8, 16 s by default.
        self.lookup_delay_s = lookup_delay_s
        self.lookup_attempts = max(1, lookup_attempts)

    @property
    def client(self):
        if self._client is None:
            import boto3
            self._client = boto3.client("ec2", region_name=self.ec2cfg.region)
        return self._client

    # -- lookups -------------------------------------------------------------
    def live_nodes(self, execution_id: str) -> list[dict]:
        pages = self.client.get_paginator("describe_instances").paginate(Filters=[
            {"Name": f"tag:{TAG_EXECUTION}", "Values": [execution_id]},
            {"Name": "instance-state-name", "Values": LIVE_STATES},
        ])
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def launched_with_tokens(self, tokens: list[str], instance_types: list[str],
                             live_only: bool = True) -> list[dict]:
        """Instances launched with one of the client ``tokens``.

        Listed by instance type (few instances of GPU types run in an account) and
        matched on each instance's ``ClientToken``: the field the ``client-token``
        filter reads, and one that moto also serves.
        """
        if not tokens or not instance_types:
            return []
        filters = [{"Name": "instance-type", "Values": sorted(set(instance_types))}]
        if live_only:
            filters.append({"Name": "instance-state-name", "Values": LIVE_STATES})
        pages = self.client.get_paginator("describe_instances").paginate(Filters=filters)
        wanted = set(tokens)
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]
                if i.get("ClientToken") in wanted]

    def _tokens(self, execution_id: str) -> list[str]:
        return [client_token(execution_id, t, z or s) for t, z, s in self._candidates()]

    def launched(self, execution_id: str) -> dict | None:
        """The live instance an earlier attempt of ``execution_id`` launched, if any is visible."""
        live = self.live_nodes(execution_id) or self.launched_with_tokens(
            self._tokens(execution_id), list(self.ec2cfg.instance_types))
        return min(live, key=lambda i: i["LaunchTime"]) if live else None

    def _node(self, inst: dict, execution_id: str) -> Node:
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        host = inst.get("PublicIpAddress") if self.ec2cfg.associate_public_ip else inst.get("PrivateIpAddress")
        return Node(kind="ec2", host=host or "", node_id=inst["InstanceId"], meta={
            "execution_id": execution_id, "instance_type": inst.get("InstanceType"),
            "zone": inst.get("Placement", {}).get("AvailabilityZone"), "region": self.ec2cfg.region,
            "expires_at": tags.get(TAG_EXPIRES)})

    # -- provision -------------------------------------------------------------
    def provision(self, execution_id: str) -> Node:
        check_execution_id(execution_id)
        inst = self.launched(execution_id)
        if inst:
            log.info("reusing %s already launched for %s", inst["InstanceId"], execution_id)
            return self._ready(inst["InstanceId"], execution_id)
        if not self.ec2cfg.ami_id:
            raise ProvisionError("provider.ec2.ami_id: required; set it to a GPU AMI with Docker and the NVIDIA "
                                 f"runtime (e.g. an AWS Deep Learning AMI) in {self.ec2cfg.region}")
        if not self.ec2cfg.instance_types:
            raise ProvisionError("provider.ec2.instance_types: empty; list at least one, e.g. [p5en.48xlarge]")
        sg = self.ensure_security_group()
        key = secrets.new_api_key()
        inst_id = self._launch(execution_id, sg, user_data(self.cfg, key))
        return self._ready(inst_id, execution_id)

    def _ready(self, inst_id: str, execution_id: str) -> Node:
        """The node once running; launched or reused, a node that fails here is terminated
        (Airflow skips the teardown of a failed setup)."""
        try:
            return self._node(self._wait_running(inst_id), execution_id)
        except Exception:
            log.error("provisioning %s failed after launch; terminating it", inst_id)
            self.terminate(inst_id)
            raise

    def _candidates(self) -> list[tuple[str, str | None, str | None]]:
        """(instance type, zone, subnet) in preference order."""
        if self.ec2cfg.subnet_ids:
            places = [(None, s) for s in self.ec2cfg.subnet_ids]
        else:
            places = [(z, None) for z in self.ec2cfg.availability_zones] or [(None, None)]
        return [(t, z, s) for t in self.ec2cfg.instance_types for z, s in places]

    def _launch(self, execution_id: str, sg: str, script: str) -> str:
        from botocore.exceptions import ClientError

        tags = [
            {"Key": "Name", "Value": f"benchcamp-{self.cfg.campaign.name}"},
            {"Key": TAG_CAMPAIGN, "Value": self.cfg.campaign.name},
            {"Key": TAG_EXECUTION, "Value": execution_id},
            {"Key": TAG_EXPIRES, "Value": expires_at(self.ec2cfg.ttl_hours)},
            {"Key": TAG_OWNER, "Value": self.ec2cfg.owner},
            {"Key": TAG_FINGERPRINT, "Value": self.cfg.fingerprint()},
        ]
        tried = []
        for itype, zone, subnet in self._candidates():
            nic: dict[str, Any] = {"DeviceIndex": 0, "AssociatePublicIpAddress": self.ec2cfg.associate_public_ip,
                                   "Groups": [sg], "DeleteOnTermination": True}
            if subnet:
                nic["SubnetId"] = subnet
            token = client_token(execution_id, itype, zone or subnet)
            kwargs: dict[str, Any] = dict(
                ImageId=self.ec2cfg.ami_id, InstanceType=itype, MinCount=1, MaxCount=1,
                ClientToken=token,
                UserData=script, NetworkInterfaces=[nic],
                MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 2},
                InstanceInitiatedShutdownBehavior="terminate",
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags},
                                   {"ResourceType": "volume", "Tags": tags}],
            )
            if zone:
                kwargs["Placement"] = {"AvailabilityZone": zone}
            if self.ec2cfg.key_name:
                kwargs["KeyName"] = self.ec2cfg.key_name
            try:
                resp = self.client.run_instances(**kwargs)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code in CAPACITY_ERRORS:
                    tried.append(f"{itype}@{zone or subnet or 'any'}: {code}")
                    log.warning("no capacity for %s in %s (%s); trying the next candidate", itype, zone or subnet, code)
                    continue
                if code == TOKEN_IN_USE:
                    inst = self._token_holder(execution_id, token, itype)
                    if inst["State"]["Name"] in LIVE_STATES:
                        log.info("reusing %s: an earlier attempt of %s launched it (client token in use)",
                                 inst["InstanceId"], execution_id)
                        return inst["InstanceId"]
                    # Its node is gone and EC2 keeps the token: the next candidate launches afresh.
                    tried.append(f"{itype}@{zone or subnet or 'any'}: token used by {inst['InstanceId']} "
                                 f"({inst['State']['Name']})")
                    log.warning("%s launched earlier for %s is %s; trying the next candidate",
                                inst["InstanceId"], execution_id, inst["State"]["Name"])
                    continue
                raise ProvisionError(f"run_instances({itype}) failed: {code}: "
                                     f"{exc.response.get('Error', {}).get('Message', '')}") from exc
            inst_id = resp["Instances"][0]["InstanceId"]
            log.info("launched %s (%s in %s) for %s", inst_id, itype, zone or subnet or "any zone", execution_id)
            return inst_id
        raise ProvisionError("no candidate could launch a node (" + "; ".join(tried) + "); add instance types "
                             "to provider.ec2.instance_types or zones to provider.ec2.availability_zones"
                             + (", or start a new run (a new execution id)" if any("token" in t for t in tried) else ""))

    def _token_holder(self, execution_id: str, token: str, itype: str) -> dict:
        """The instance EC2 says holds ``token`` (it may not be listed yet): polled with backoff."""
        for attempt in range(self.lookup_attempts):
            if attempt:
                time.sleep(self.lookup_delay_s * 2 ** (attempt - 1))
            live = self.live_nodes(execution_id)
            if live:
                return min(live, key=lambda i: i["LaunchTime"])
            found = self.launched_with_tokens([token], [itype], live_only=False)
            if found:
                return max(found, key=lambda i: i["LaunchTime"])
        raise ProvisionError(
            f"run_instances({itype}): {TOKEN_IN_USE}: an earlier attempt of execution {execution_id} launched "
            f"an instance with this client token, but none is listed after {self.lookup_attempts} lookups (EC2 "
            f"listings lag launches); retry the task (it reuses that instance), or find it by the tag "
            f"{TAG_EXECUTION}={execution_id}")

    def _wait_running(self, inst_id: str) -> dict:
        self.client.get_waiter("instance_running").wait(InstanceIds=[inst_id], WaiterConfig=self.waiter)
        return self.client.describe_instances(InstanceIds=[inst_id])["Reservations"][0]["Instances"][0]

    def ensure_security_group(self) -> str:
        """A per-campaign group admitting only the orchestrator on the engine port."""
        from botocore.exceptions import ClientError

        vpc = self.ec2cfg.vpc_id or self._default_vpc()
        name = f"benchcamp-engine-{self.cfg.campaign.name}"
        found = self.client.describe_security_groups(Filters=[
            {"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
        if found:
            sg = found[0]["GroupId"]
        else:
            sg = self.client.create_security_group(
                GroupName=name, VpcId=vpc, Description="benchcamp engine: orchestrator only",
                TagSpecifications=[{"ResourceType": "security-group",
                                    "Tags": [{"Key": TAG_CAMPAIGN, "Value": self.cfg.campaign.name}]}])["GroupId"]
        port = self.ec2cfg.engine_port
        try:
            self.client.authorize_security_group_ingress(GroupId=sg, IpPermissions=[{
                "IpProtocol": "tcp", "FromPort": port, "ToPort": port,
                "IpRanges": [{"CidrIp": orchestrator_cidr(self.cfg), "Description": "benchcamp orchestrator"}]}])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
                raise
        return sg

    def _default_vpc(self) -> str:
        vpcs = self.client.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
        if not vpcs:
            raise ProvisionError(f"provider.ec2.vpc_id: no default VPC in {self.ec2cfg.region}; set vpc_id and subnet_ids")
        return vpcs[0]["VpcId"]

    # -- key, teardown -------------------------------------------------------
    def api_key_for(self, node: Node) -> str:
        """The engine key of ``node``, read back from its user data."""
        attr = self.client.describe_instance_attribute(InstanceId=node.node_id, Attribute="userData")
        raw = attr.get("UserData", {}).get("Value")
        if not raw:
            raise ProvisionError(f"{node.node_id}: no user data; it was not launched by benchcamp")
        m = _KEY_LINE.search(base64.b64decode(raw).decode(errors="replace"))
        if not m:
            raise ProvisionError(f"{node.node_id}: no engine key in its user data; it was not launched by benchcamp")
        secrets.register(m.group(1))
        return m.group(1)

    def terminate(self, *inst_ids: str) -> None:
        """Terminate and wait until the instances are gone (idempotent)."""
        from botocore.exceptions import ClientError

        try:
            res = self.client.describe_instances(InstanceIds=list(inst_ids))["Reservations"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidInstanceID.NotFound":
                raise
            return
        inst_ids = tuple(i["InstanceId"] for r in res for i in r["Instances"] if i["State"]["Name"] != "terminated")
        if not inst_ids:
            return
        self.client.terminate_instances(InstanceIds=list(inst_ids))
        self.client.get_waiter("instance_terminated").wait(InstanceIds=list(inst_ids), WaiterConfig=self.waiter)
        log.info("terminated %s", ", ".join(inst_ids))

    def deprovision(self, node: Node) -> None:
        # Also any other live node of this execution (e.g. from a launch whose answer was lost).
        ids = {node.node_id} | {i["InstanceId"] for i in self.live_nodes(node.meta.get("execution_id", ""))
                                if node.meta.get("execution_id")}
        self.terminate(*sorted(ids))
