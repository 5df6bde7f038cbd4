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

Secrets (the engine's API key, an ``--hf-token`` from ``engine.extra_args``)
never travel in user data, which anyone holding
``ec2:DescribeInstanceAttribute`` can read. With ``secrets_via: ssm`` (the
default) they go to SSM Parameter Store as one SecureString per execution
(:func:`parameter_name`, tagged with the execution and its expiry); the
instance runs with ``provider.ec2.instance_profile``, whose role needs
``ssm:GetParameter`` on
``arn:aws:ssm:<region>:<account>:parameter/benchcamp/engine-env/*`` (plus
``kms:Decrypt`` only if the account encrypts Parameter Store with a customer
managed key; the AWS managed ``aws/ssm`` key lets every principal of the
account decrypt: https://docs.aws.amazon.com/systems-manager/latest/userguide/ps-restrict-decryption.html,
read 2026-11-30). User data fetches the parameter at boot (``aws ssm
get-parameter --with-decryption``; the AMI needs the AWS CLI, as the Deep
Learning AMIs have) into a root-only env file the engine container reads; the
engine's argv holds no secret. Deprovision and the reaper delete the
parameter. A retry reuses the parameter, so the key matches the node it
reuses. ``secrets_via: userdata`` (no role to manage) writes the env file from
user data instead, with a warning: the secrets are then readable as user data.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shlex
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchcamp import secrets
from benchcamp.config import Config
from benchcamp.provision.base import Node, Provider, ProvisionError, check_execution_id

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
SSM_PREFIX = "/benchcamp/engine-env/"
_KEY_LINE = re.compile(r"^VLLM_API_KEY=(\S+)$", re.MULTILINE)
_SSM_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def parameter_name(execution_id: str) -> str:
    """The SSM parameter holding the engine env of ``execution_id`` (SSM names allow [A-Za-z0-9_.-/];
    the digest keeps two ids that differ only in other characters apart)."""
    digest = hashlib.sha256(execution_id.encode()).hexdigest()[:8]
    return f"{SSM_PREFIX}{_SSM_UNSAFE.sub('_', execution_id)[:200]}-{digest}"


def engine_command(cfg: Config) -> tuple[list[str], dict[str, str]]:
    """(``vllm serve`` argv without secrets, the env that carries them: VLLM_API_KEY (a fresh key unless
    engine.extra_args names one), HF_TOKEN)."""
    from benchcamp.deploy.argv import vllm_argv
    from benchcamp.secret_refs import engine_secret_env

    argv, env = secrets.split_engine_secrets(vllm_argv(cfg, host="0.0.0.0", port=cfg.provider.ec2.engine_port))
    env.update(engine_secret_env(cfg))  # engine.hf_token_ref -> HF_TOKEN
    env.setdefault("VLLM_API_KEY", secrets.new_api_key())
    return argv, env


def env_file_text(env: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in env.items())


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


def user_data(cfg: Config, argv: list[str], env: dict[str, str] | None = None, parameter: str | None = None) -> str:
    """Boot script: the engine env file (fetched from the SSM ``parameter``, or written from ``env`` when
    provider.ec2.secrets_via=userdata), then the pinned vLLM with ``argv`` (no secrets in it)."""
    ec2 = cfg.provider.ec2
    ttl_min = max(1, int(ec2.ttl_hours * 60))
    lines = [
        "#!/bin/bash",
        "# benchcamp engine node. Never `set -x` here: secrets must stay out of cloud-init logs.",
        "set -euo pipefail",
        "umask 077",
        f"shutdown -h +{ttl_min} 'benchcamp TTL reached' || true  # terminates (shutdown behaviour)",
        "install -d -m 700 /etc/benchcamp",
    ]
    if parameter:
        # The instance role's credentials can lag the boot by a few seconds: retry for ~5 minutes.
        get = (
            f"aws ssm get-parameter --region {shlex.quote(ec2.region)} --name {shlex.quote(parameter)} "
            f"--with-decryption --query Parameter.Value --output text > {ENV_FILE}"
        )
        lines += [
            f"for attempt in $(seq 30); do if {get}; then break; fi; sleep 10; done",
            (
                f"[ -s {ENV_FILE} ] || {{ echo 'benchcamp: cannot read {parameter} from SSM; check the role of "
                f"provider.ec2.instance_profile' >&2; exit 1; }}"
            ),
        ]
    else:
        lines += [f"cat > {ENV_FILE} <<'BENCHCAMP_EOF'", env_file_text(env or {}).rstrip("\n"), "BENCHCAMP_EOF"]
    lines.append(f"chmod 600 {ENV_FILE}")
    if ec2.install == "container":
        image = f"{ec2.container_image}:v{cfg.engine.version}"
        # The official image's entrypoint is `vllm serve`: pass what follows it.
        lines.append(
            "docker run -d --name benchcamp-engine --gpus all --ipc=host "
            f"-p {ec2.engine_port}:{ec2.engine_port} --env-file {ENV_FILE} "
            f"{shlex.quote(image)} {shlex.join(argv[2:])}"
        )
    else:
        lines += [
            "python3 -m venv /opt/vllm",
            f"/opt/vllm/bin/pip install --quiet {shlex.quote('vllm==' + cfg.engine.version)}",
            (
                f"systemd-run --unit benchcamp-engine --property=EnvironmentFile={ENV_FILE} "
                f"/opt/vllm/bin/{shlex.join(argv)}"
            ),
        ]
    return "\n".join(lines) + "\n"


class Ec2Provider(Provider):
    kind = "ec2"

    def __init__(
        self,
        cfg: Config,
        client: Any = None,
        waiter_delay_s: int = 15,
        waiter_attempts: int = 80,
        lookup_delay_s: float = 2.0,
        lookup_attempts: int = 5,
        ssm: Any = None,
    ):
        self.cfg = cfg
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
                f"may ssm:GetParameter on arn:aws:ssm:{self.ec2cfg.region}:<account>:parameter{SSM_PREFIX}* "
                "(or set provider.ec2.secrets_via=userdata, which leaves the secrets readable as user data)"
            )
        sg = self.ensure_security_group()
        if self.ec2cfg.secrets_via == "ssm":
            argv, env = engine_command(self.cfg)
            script = user_data(self.cfg, argv, parameter=self.store_secrets(execution_id, env))
        else:
            log.warning(
                "provider.ec2.secrets_via=userdata: the engine's API key%s is readable as user data by "
                "anyone with ec2:DescribeInstanceAttribute; prefer secrets_via=ssm",
                " and HF token"
                if self.cfg.engine.hf_token_ref
                or any(a.startswith(("--hf-token", "--hf_token")) for a in self.cfg.engine.extra_args)
                else "",
            )
            argv, env = engine_command(self.cfg)
            script = user_data(self.cfg, argv, env=env)
        # A launch that fails keeps the parameter (a node of this execution may still come up and read
        # it); the reaper deletes it once the execution's expiry passes.
        inst_id = self._launch(execution_id, sg, script)
        return self._ready(inst_id, execution_id)

    # -- secrets in SSM ---------------------------------------------------------
    def _read_parameter(self, execution_id: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            value = self.ssm.get_parameter(Name=parameter_name(execution_id), WithDecryption=True)["Parameter"]["Value"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            raise
        for line in value.splitlines():
            secrets.register(line.partition("=")[2])
        return value

    def _stored_api_key(self, execution_id: str) -> str | None:
        """The key an earlier attempt stored (its node, if launched, reads that one)."""
        value = self._read_parameter(execution_id)
        m = _KEY_LINE.search(value) if value else None
        return m.group(1) if m else None

    def store_secrets(self, execution_id: str, env: dict[str, str]) -> str:
        """Put the engine ``env`` (API key, HF token) in SSM as a SecureString; returns the parameter name.

        An existing parameter of this execution is kept as it is: a node launched by an earlier attempt
        has read it already."""
        name = parameter_name(execution_id)
        if self._read_parameter(execution_id) is not None:
            return name
        tags = [
            {"Key": TAG_CAMPAIGN, "Value": self.cfg.campaign.name},
            {"Key": TAG_EXECUTION, "Value": execution_id},
            {"Key": TAG_EXPIRES, "Value": expires_at(self.ec2cfg.ttl_hours)},
        ]
        self.ssm.put_parameter(
            Name=name,
            Value=env_file_text(env),
            Type="SecureString",
            Tags=tags,
            Description=f"benchcamp engine env of {execution_id[:900]}",
        )
        log.info("engine secrets of %s stored in SSM parameter %s (SecureString)", execution_id, name)
        return name

    def delete_secrets(self, execution_id: str) -> None:
        """Delete the execution's SSM parameter (idempotent)."""
        delete_parameter(self.ssm, parameter_name(execution_id))

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
                    f"{parameter_name(node.meta.get('execution_id', ''))}; it was deleted or "
                    "the node was not launched by this execution"
                )
            return key
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
        execution_id = node.meta.get("execution_id", "")
        ids = {node.node_id} | {i["InstanceId"] for i in self.live_nodes(execution_id) if execution_id}
        self.terminate(*sorted(ids))
        if execution_id:  # also with secrets_via=userdata: a parameter of an earlier ssm attempt goes too
            self.delete_secrets(execution_id)


def delete_parameter(ssm: Any, name: str) -> bool:
    """Delete an SSM parameter; False if it was not there."""
    from botocore.exceptions import ClientError

    try:
        ssm.delete_parameter(Name=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return False
        raise
    log.info("deleted SSM parameter %s", name)
    return True
