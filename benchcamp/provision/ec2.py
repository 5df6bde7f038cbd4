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

Secrets travel through SSM Parameter Store (``benchcamp.provision.ec2_secrets``), never in user data by
default.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchcamp.config import Config
from benchcamp.provision import ec2_secrets
from benchcamp.provision.base import Node, NodeBoot, Provider, ProvisionError, check_execution_id
from benchcamp.provision.ec2_secrets import UNSAFE_NAME_CHARS
from benchcamp.secrets import redaction

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


# Instance types with Elastic Fabric Adapter (EFA) interfaces, the RDMA network a multi-node engine needs
# (vLLM's DP/EP all-to-all and NIXL between nodes), with their EFA interface count. Source: Amazon EC2 User
# Guide, "Elastic Fabric Adapter - supported instance types"
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types, read 2026-12-01); check a
# region with `aws ec2 describe-instance-types --filters Name=network-info.efa-supported,Values=true`. Interface
# counts: the EC2 accelerated-computing specifications (p5/p5e 32, p5en 16, p4d/p4de 4), as torchx's
# named_resources_aws.py lists them (meta-pytorch/torchx, EFA_DEVICE).
EFA_INSTANCE_TYPES = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "p6-b300.48xlarge": 8,
    "p6e-gb200.36xlarge": 4,
}
TAG_NODE = "benchcamp:node"  # "<index> <role> <instance> <node>" of a multi-node deployment


def client_token(execution_id: str, instance_type: str, zone: str | None) -> str:
    """Idempotency token for run_instances: same execution + candidate -> same token (max 64 chars)."""
    return hashlib.sha256(f"{execution_id}|{instance_type}|{zone or ''}".encode()).hexdigest()[:64]


def expires_at(ttl_hours: float, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
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
        raise ProvisionError(
            "provider.ec2.orchestrator_cidr: could not find this machine's address "
            f"({exc}); set it to the orchestrator's CIDR, e.g. 10.0.1.23/32"
        ) from None
    return f"{addr}/32"


def cluster_nodes(cfg: Config) -> list[Any]:
    """The nodes of a multi-node deployment (benchcamp.topology NodePlacement), or [] for one node."""
    from benchcamp.config import topology_of

    nodes = topology_of(cfg).nodes()
    return nodes if len(nodes) > 1 else []


def placement_group_name(execution_id: str) -> str:
    """The execution's cluster placement group (names: up to 255 ASCII characters)."""
    digest = hashlib.sha256(execution_id.encode()).hexdigest()[:8]
    return f"benchcamp-{UNSAFE_NAME_CHARS.sub('_', execution_id)[:200]}-{digest}"


class Ec2Provider(Provider):
    kind = "ec2"
    _boot: NodeBoot | None

    def __init__(
        self,
        cfg: Config,
        client: Any = None,
        waiter_delay_s: int = 15,
        waiter_attempts: int = 80,
        lookup_delay_s: float = 2.0,
        lookup_attempts: int = 5,
        ssm: Any = None,
        boot: NodeBoot | None = None,
    ):
        self.cfg = cfg
        self._boot = boot
        self.ec2cfg = cfg.provider.ec2
        self._client = client
        self._ssm = ssm
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

    @property
    def ssm(self):
        if self._ssm is None:
            import boto3

            self._ssm = boto3.client("ssm", region_name=self.ec2cfg.region)
        return self._ssm

    # -- lookups -------------------------------------------------------------
    def live_nodes(self, execution_id: str) -> list[dict]:
        pages = self.client.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{TAG_EXECUTION}", "Values": [execution_id]},
                {"Name": "instance-state-name", "Values": LIVE_STATES},
            ]
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def launched_with_tokens(self, tokens: list[str], instance_types: list[str], live_only: bool = True) -> list[dict]:
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
        return [
            i for page in pages for r in page["Reservations"] for i in r["Instances"] if i.get("ClientToken") in wanted
        ]

    def _tokens(self, execution_id: str) -> list[str]:
        return [client_token(execution_id, t, z or s) for t, z, s in self._candidates()]

    def launched(self, execution_id: str) -> dict | None:
        """The live instance an earlier attempt of ``execution_id`` launched, if any is visible."""
        live = self.live_nodes(execution_id) or self.launched_with_tokens(
            self._tokens(execution_id), list(self.ec2cfg.instance_types)
        )
        return min(live, key=lambda i: i["LaunchTime"]) if live else None

    def _node(self, inst: dict, execution_id: str) -> Node:
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        host = inst.get("PublicIpAddress") if self.ec2cfg.associate_public_ip else inst.get("PrivateIpAddress")
        return Node(
            kind="ec2",
            host=host or "",
            node_id=inst["InstanceId"],
            meta={
                "execution_id": execution_id,
                "instance_type": inst.get("InstanceType"),
                "zone": inst.get("Placement", {}).get("AvailabilityZone"),
                "region": self.ec2cfg.region,
                "expires_at": tags.get(TAG_EXPIRES),
            },
        )

    # -- provision -------------------------------------------------------------
    def provision(self, execution_id: str) -> Node:
        check_execution_id(execution_id)
        if cluster_nodes(self.cfg):
            return self.provision_cluster(execution_id)
        inst = self.launched(execution_id)
        if inst:
            log.info("reusing %s already launched for %s", inst["InstanceId"], execution_id)
            return self._ready(inst["InstanceId"], execution_id)
        if not self.ec2cfg.ami_id:
            raise ProvisionError(
                "provider.ec2.ami_id: required; set it to a GPU AMI with Docker and the NVIDIA "
                f"runtime (e.g. an AWS Deep Learning AMI) in {self.ec2cfg.region}"
            )
        if not self.ec2cfg.instance_types:
            raise ProvisionError("provider.ec2.instance_types: empty; list at least one, e.g. [p5en.48xlarge]")
        if self.ec2cfg.secrets_via == "ssm" and not self.ec2cfg.instance_profile:
            raise ProvisionError(
                "provider.ec2.instance_profile: required with secrets_via=ssm; name an instance profile whose role "
                f"may ssm:GetParameter on arn:aws:ssm:{self.ec2cfg.region}:<account>:parameter{ec2_secrets.SSM_PREFIX}* "
                "(or set provider.ec2.secrets_via=userdata, which leaves the secrets readable as user data)"
            )
        sg = self.ensure_security_group()
        if self.ec2cfg.secrets_via == "ssm":
            script = self.boot.script(parameter=self.store_secrets(execution_id, self.boot.engine_env()))
        else:
            log.warning(
                "provider.ec2.secrets_via=userdata: the engine's API key%s is readable as user data by "
                "anyone with ec2:DescribeInstanceAttribute; prefer secrets_via=ssm",
                " and HF token"
                if self.cfg.engine.hf_token_ref
                or any(a.startswith(("--hf-token", "--hf_token")) for a in self.cfg.engine.extra_args)
                else "",
            )
            script = self.boot.script(env=self.boot.engine_env())
        # A launch that fails keeps the parameter (a node of this execution may still come up and read
        # it); the reaper deletes it once the execution's expiry passes.
        inst_id = self._launch(execution_id, sg, script)
        return self._ready(inst_id, execution_id)

    # -- a multi-node deployment ------------------------------------------------
    def _check_launchable(self) -> None:
        if not self.ec2cfg.ami_id:
            raise ProvisionError(
                "provider.ec2.ami_id: required; set it to a GPU AMI with Docker, the NVIDIA "
                f"runtime and the EFA driver (e.g. an AWS Deep Learning AMI) in {self.ec2cfg.region}"
            )
        if not self.ec2cfg.instance_types:
            raise ProvisionError("provider.ec2.instance_types: empty; list at least one, e.g. [p5en.48xlarge]")
        if self.ec2cfg.secrets_via == "ssm" and not self.ec2cfg.instance_profile:
            raise ProvisionError(
                "provider.ec2.instance_profile: required with secrets_via=ssm; name an instance profile whose role "
                f"may ssm:GetParameter on arn:aws:ssm:{self.ec2cfg.region}:<account>:parameter{ec2_secrets.SSM_PREFIX}*"
            )

    def provision_cluster(self, execution_id: str) -> Node:
        """Every node of a multi-node deployment in one cluster placement group, EFA interfaces, one instance
        type and zone for all; each node's boot configuration holds its role, DP ranks and its head's address
        (heads launch first). Returns the first head (its meta lists every node); on any failure every node
        launched, the placement group and the secrets are released before the error is raised."""
        placements = cluster_nodes(self.cfg)
        self._check_launchable()
        not_efa = [t for t in self.ec2cfg.instance_types if t not in EFA_INSTANCE_TYPES]
        if not_efa:
            raise ProvisionError(
                f"provider.ec2.instance_types: {', '.join(not_efa)} has no EFA; a {len(placements)}-node deployment "
                f"needs RDMA between its nodes: use {', '.join(sorted(EFA_INSTANCE_TYPES))}"
            )
        live = self.live_nodes(execution_id)
        if len(live) == len(placements):
            log.info("reusing the %d nodes already launched for %s", len(live), execution_id)
            return self._cluster_ready([i["InstanceId"] for i in live], execution_id)
        if live:  # a partial cluster of an earlier attempt: its boot configuration names heads that may be gone
            log.warning(
                "%s has %d of %d nodes from an earlier attempt; relaunching all",
                execution_id,
                len(live),
                len(placements),
            )
            self.terminate(*(i["InstanceId"] for i in live))
        try:
            sg = self.ensure_security_group()
            self._allow_cluster_traffic(sg)
            group = self.ensure_placement_group(execution_id)
            argv_env = self.boot.engine_env()
            parameter = self.store_secrets(execution_id, argv_env) if self.ec2cfg.secrets_via == "ssm" else None
            env = None if parameter else argv_env
            ids = self._launch_cluster(execution_id, placements, sg, group, env, parameter)
        except BaseException:
            self.release_cluster(execution_id)
            raise
        return self._cluster_ready(ids, execution_id)

    def _launch_cluster(
        self,
        execution_id: str,
        placements: list[Any],
        sg: str,
        group: str,
        env: dict[str, str] | None,
        parameter: str | None,
    ) -> list[str]:
        from botocore.exceptions import ClientError

        tried = []
        order = sorted(placements, key=lambda p: (not p.head, p.index))  # heads first: peers need their address
        for itype, zone, subnet in self._candidates():
            ids: list[str] = []
            heads: dict[tuple[str, int], str] = {}
            try:
                for p in order:
                    head_ip = None if p.head else heads[(p.role, p.instance)]
                    script = self.boot.node_script(p, head_ip, env, parameter)
                    inst = self._run_node(execution_id, p, itype, zone, subnet, sg, group, script)
                    ids.append(inst["InstanceId"])
                    if p.head:
                        heads[(p.role, p.instance)] = inst.get("PrivateIpAddress", "")
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if ids:
                    self.terminate(*ids)  # a cluster is all or nothing: one zone, one type, one group
                if code in CAPACITY_ERRORS:
                    tried.append(f"{len(placements)} x {itype}@{zone or subnet or 'any'}: {code} after {len(ids)}")
                    log.warning("no capacity for %d x %s (%s); trying the next candidate", len(placements), itype, code)
                    continue
                raise ProvisionError(
                    f"run_instances({itype}) failed: {code}: {exc.response.get('Error', {}).get('Message', '')}"
                ) from exc
            log.info("launched %d x %s for %s in placement group %s", len(ids), itype, execution_id, group)
            return ids
        raise ProvisionError(
            "no candidate could launch every node (" + "; ".join(tried) + "); add instance types to "
            "provider.ec2.instance_types or zones to provider.ec2.availability_zones (a cluster placement group "
            "lives in one zone)"
        )

    def _run_node(
        self,
        execution_id: str,
        p: Any,
        itype: str,
        zone: str | None,
        subnet: str | None,
        sg: str,
        group: str,
        script: str,
    ) -> dict:
        tags = [
            {"Key": "Name", "Value": f"benchcamp-{self.cfg.campaign.name}-{p.role}{p.instance}-n{p.node}"},
            {"Key": TAG_CAMPAIGN, "Value": self.cfg.campaign.name},
            {"Key": TAG_EXECUTION, "Value": execution_id},
            {"Key": TAG_EXPIRES, "Value": expires_at(self.ec2cfg.ttl_hours)},
            {"Key": TAG_OWNER, "Value": self.ec2cfg.owner},
            {"Key": TAG_FINGERPRINT, "Value": self.cfg.fingerprint()},
            {"Key": TAG_NODE, "Value": f"{p.index} {p.role} {p.instance} {p.node}"},
        ]
        nic: dict[str, Any] = {
            "DeviceIndex": 0,
            "InterfaceType": "efa",
            "AssociatePublicIpAddress": self.ec2cfg.associate_public_ip,
            "Groups": [sg],
            "DeleteOnTermination": True,
        }
        if subnet:
            nic["SubnetId"] = subnet
        placement: dict[str, Any] = {"GroupName": group}
        if zone:
            placement["AvailabilityZone"] = zone
        kwargs: dict[str, Any] = dict(
            ImageId=self.ec2cfg.ami_id,
            InstanceType=itype,
            MinCount=1,
            MaxCount=1,
            ClientToken=client_token(f"{execution_id}#node{p.index}", itype, zone or subnet),
            UserData=script,
            NetworkInterfaces=[nic],
            Placement=placement,
            MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 2},
            InstanceInitiatedShutdownBehavior="terminate",
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
        )
        if self.ec2cfg.key_name:
            kwargs["KeyName"] = self.ec2cfg.key_name
        if self.ec2cfg.instance_profile:
            kwargs["IamInstanceProfile"] = {"Name": self.ec2cfg.instance_profile}
        return dict(self.client.run_instances(**kwargs)["Instances"][0])

    def _cluster_ready(self, ids: list[str], execution_id: str) -> Node:
        try:
            insts = [self._wait_running(i) for i in ids]
        except BaseException:
            log.error("nodes of %s failed after launch; releasing all of them", execution_id)
            self.release_cluster(execution_id, ids)
            raise
        nodes = []
        for inst in insts:
            n = self._node(inst, execution_id)
            tag = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}.get(TAG_NODE, "0 unified 0 0").split()
            nodes.append(
                {
                    "node_id": n.node_id,
                    "host": n.host,
                    "index": int(tag[0]),
                    "role": tag[1],
                    "instance": int(tag[2]),
                    "node": int(tag[3]),
                }
            )
        nodes.sort(key=lambda n: n["index"])
        front = next(n for n in nodes if n["node"] == 0)
        inst = next(i for i in insts if i["InstanceId"] == front["node_id"])
        node = self._node(inst, execution_id)
        node.meta["cluster"] = nodes
        node.meta["placement_group"] = placement_group_name(execution_id)
        return node

    def _allow_cluster_traffic(self, sg: str) -> None:
        """EFA: the group must admit all traffic from itself (and let it out, which a new group does)."""
        from botocore.exceptions import ClientError

        try:
            self.client.authorize_security_group_ingress(
                GroupId=sg, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": sg}]}]
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
                raise

    def ensure_placement_group(self, execution_id: str) -> str:
        """The execution's cluster placement group (nodes on one low-latency network spine), made once."""
        from botocore.exceptions import ClientError

        name = placement_group_name(execution_id)
        try:
            self.client.create_placement_group(
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=[
                    {
                        "ResourceType": "placement-group",
                        "Tags": [
                            {"Key": TAG_EXECUTION, "Value": execution_id},
                            {"Key": TAG_EXPIRES, "Value": expires_at(self.ec2cfg.ttl_hours)},
                        ],
                    }
                ],
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Duplicate":
                raise
        return name

    def delete_placement_group(self, execution_id: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_placement_group(GroupName=placement_group_name(execution_id))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("InvalidPlacementGroup.Unknown",):
                raise

    def release_cluster(self, execution_id: str, ids: list[str] | None = None) -> None:
        """Every node of the execution (and ``ids``), then its placement group and secrets; best effort per part."""
        ids_all = set(ids or []) | {i["InstanceId"] for i in self.live_nodes(execution_id)}
        for part in (
            lambda: self.terminate(*sorted(ids_all)) if ids_all else None,
            lambda: self.delete_placement_group(execution_id),
            lambda: self.delete_secrets(execution_id),
        ):
            try:
                part()
            except Exception as exc:  # noqa: BLE001 - release the rest; the reaper finds what is left by tag
                log.error("releasing %s: %s", execution_id, redaction.redact(str(exc)))

    # -- secrets in SSM (benchcamp.provision.ec2_secrets) -------------------------
    def _stored_api_key(self, execution_id: str) -> str | None:
        return ec2_secrets.stored_api_key(self.ssm, execution_id)

    def store_secrets(self, execution_id: str, env: dict[str, str]) -> str:
        tags = [
            {"Key": TAG_CAMPAIGN, "Value": self.cfg.campaign.name},
            {"Key": TAG_EXECUTION, "Value": execution_id},
            {"Key": TAG_EXPIRES, "Value": expires_at(self.ec2cfg.ttl_hours)},
        ]
        return ec2_secrets.store(self.ssm, execution_id, env, tags)

    def delete_secrets(self, execution_id: str) -> None:
        ec2_secrets.delete_parameter(self.ssm, ec2_secrets.parameter_name(execution_id))

    def _ready(self, inst_id: str, execution_id: str) -> Node:
        """The node once running; launched or reused, a node that fails here is terminated
        (Airflow skips the teardown of a failed setup)."""
        try:
            return self._node(self._wait_running(inst_id), execution_id)
        except Exception:
            log.error("provisioning %s failed after launch; terminating it", inst_id)
            self.terminate(inst_id)
            self.delete_secrets(execution_id)
            raise

    def _candidates(self) -> list[tuple[str, str | None, str | None]]:
        """(instance type, zone, subnet) in preference order."""
        places: list[tuple[str | None, str | None]]
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
            nic: dict[str, Any] = {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": self.ec2cfg.associate_public_ip,
                "Groups": [sg],
                "DeleteOnTermination": True,
            }
            if subnet:
                nic["SubnetId"] = subnet
            token = client_token(execution_id, itype, zone or subnet)
            kwargs: dict[str, Any] = dict(
                ImageId=self.ec2cfg.ami_id,
                InstanceType=itype,
                MinCount=1,
                MaxCount=1,
                ClientToken=token,
                UserData=script,
                NetworkInterfaces=[nic],
                MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 2},
                InstanceInitiatedShutdownBehavior="terminate",
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": tags},
                    {"ResourceType": "volume", "Tags": tags},
                ],
            )
            if zone:
                kwargs["Placement"] = {"AvailabilityZone": zone}
            if self.ec2cfg.key_name:
                kwargs["KeyName"] = self.ec2cfg.key_name
            if self.ec2cfg.instance_profile:
                kwargs["IamInstanceProfile"] = {"Name": self.ec2cfg.instance_profile}
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
                        log.info(
                            "reusing %s: an earlier attempt of %s launched it (client token in use)",
                            inst["InstanceId"],
                            execution_id,
                        )
                        return inst["InstanceId"]
                    # Its node is gone and EC2 keeps the token: the next candidate launches afresh.
                    tried.append(
                        f"{itype}@{zone or subnet or 'any'}: token used by {inst['InstanceId']} "
                        f"({inst['State']['Name']})"
                    )
                    log.warning(
                        "%s launched earlier for %s is %s; trying the next candidate",
                        inst["InstanceId"],
                        execution_id,
                        inst["State"]["Name"],
                    )
                    continue
                raise ProvisionError(
                    f"run_instances({itype}) failed: {code}: {exc.response.get('Error', {}).get('Message', '')}"
                ) from exc
            inst_id = resp["Instances"][0]["InstanceId"]
            log.info("launched %s (%s in %s) for %s", inst_id, itype, zone or subnet or "any zone", execution_id)
            return inst_id
        raise ProvisionError(
            "no candidate could launch a node (" + "; ".join(tried) + "); add instance types "
            "to provider.ec2.instance_types or zones to provider.ec2.availability_zones"
            + (", or start a new run (a new execution id)" if any("token" in t for t in tried) else "")
        )

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
            f"{TAG_EXECUTION}={execution_id}"
        )

    def _wait_running(self, inst_id: str) -> dict:
        self.client.get_waiter("instance_running").wait(InstanceIds=[inst_id], WaiterConfig=self.waiter)
        return self.client.describe_instances(InstanceIds=[inst_id])["Reservations"][0]["Instances"][0]

    def ensure_security_group(self) -> str:
        """A per-campaign group admitting only the orchestrator on the engine port."""
        from botocore.exceptions import ClientError

        vpc = self.ec2cfg.vpc_id or self._default_vpc()
        name = f"benchcamp-engine-{self.cfg.campaign.name}"
        found = self.client.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc]}]
        )["SecurityGroups"]
        if found:
            sg = found[0]["GroupId"]
        else:
            sg = self.client.create_security_group(
                GroupName=name,
                VpcId=vpc,
                Description="benchcamp engine: orchestrator only",
                TagSpecifications=[
                    {"ResourceType": "security-group", "Tags": [{"Key": TAG_CAMPAIGN, "Value": self.cfg.campaign.name}]}
                ],
            )["GroupId"]
        port = self.ec2cfg.engine_port
        try:
            self.client.authorize_security_group_ingress(
                GroupId=sg,
                IpPermissions=[
                    {
                        "IpProtocol": "tcp",
                        "FromPort": port,
                        "ToPort": port,
                        "IpRanges": [{"CidrIp": orchestrator_cidr(self.cfg), "Description": "benchcamp orchestrator"}],
                    }
                ],
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
                raise
        return sg

    def _default_vpc(self) -> str:
        vpcs = self.client.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
        if not vpcs:
            raise ProvisionError(
                f"provider.ec2.vpc_id: no default VPC in {self.ec2cfg.region}; set vpc_id and subnet_ids"
            )
        return vpcs[0]["VpcId"]

    # -- key, teardown -------------------------------------------------------
    def api_key_for(self, node: Node) -> str:
        """The engine key of ``node``: from its SSM parameter, or read back from its user data."""
        if self.ec2cfg.secrets_via == "ssm":
            key = self._stored_api_key(node.meta.get("execution_id", ""))
            if not key:
                raise ProvisionError(
                    f"{node.node_id}: no engine key in SSM parameter "
                    f"{ec2_secrets.parameter_name(node.meta.get('execution_id', ''))}; it was deleted or "
                    "the node was not launched by this execution"
                )
            return key
        attr = self.client.describe_instance_attribute(InstanceId=node.node_id, Attribute="userData")
        raw = attr.get("UserData", {}).get("Value")
        if not raw:
            raise ProvisionError(f"{node.node_id}: no user data; it was not launched by benchcamp")
        m = ec2_secrets.KEY_LINE.search(base64.b64decode(raw).decode(errors="replace"))
        if not m:
            raise ProvisionError(f"{node.node_id}: no engine key in its user data; it was not launched by benchcamp")
        redaction.register(m.group(1))
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
        execution_id = node.meta.get("execution_id", "")
        ids = {node.node_id} | {i["InstanceId"] for i in self.live_nodes(execution_id) if execution_id}
        ids |= {n["node_id"] for n in node.meta.get("cluster") or []}  # every node of a multi-node deployment
        self.terminate(*sorted(ids))
        if node.meta.get("placement_group") and execution_id:
            self.delete_placement_group(execution_id)
        if execution_id:  # also with secrets_via=userdata: a parameter of an earlier ssm attempt goes too
            self.delete_secrets(execution_id)
