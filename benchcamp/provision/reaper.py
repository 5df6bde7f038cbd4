"""The reaper: terminate benchcamp nodes whose ``benchcamp:expires-at`` has passed.

The last line of defence against a node left running by a crashed
orchestrator (the nightly DAG runs it; also ``benchcamp reap``). Only
instances carrying both benchcamp tags are considered; an unparseable expiry is
reported and left alone rather than guessed. The engine secrets of reaped
executions (SSM parameters under ``/benchcamp/engine-env/``) are deleted too,
and so is any such parameter past its own expiry tag (a launch that failed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from benchcamp.provision.ec2 import TAG_EXECUTION, TAG_EXPIRES
from benchcamp.provision.ec2_secrets import SSM_PREFIX, delete_parameter, parameter_name

log = logging.getLogger(__name__)


@dataclass
class Reaped:
    instance_id: str
    execution_id: str
    expires_at: str
    state: str


def _expiry(value: str) -> datetime:
    when = datetime.fromisoformat(value)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def expired_nodes(client: Any, now: datetime | None = None) -> tuple[list[Reaped], list[str]]:
    """(expired benchcamp instances, warnings about unreadable expiry tags)."""
    now = now or datetime.now(UTC)
    pages = client.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "tag-key", "Values": [TAG_EXPIRES]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
    )
    expired, warnings = [], []
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                if TAG_EXECUTION not in tags:
                    continue
                try:
                    when = _expiry(tags[TAG_EXPIRES])
                except ValueError:
                    warnings.append(
                        f"{inst['InstanceId']}: {TAG_EXPIRES}={tags[TAG_EXPIRES]!r} is not ISO 8601; left running"
                    )
                    continue
                if when <= now:
                    expired.append(
                        Reaped(inst["InstanceId"], tags[TAG_EXECUTION], tags[TAG_EXPIRES], inst["State"]["Name"])
                    )
    return expired, warnings


def expired_parameters(ssm: Any, now: datetime | None = None) -> list[str]:
    """benchcamp's engine-secret parameters whose expiry tag has passed (values are never read)."""
    now = now or datetime.now(UTC)
    pages = ssm.get_paginator("describe_parameters").paginate(
        ParameterFilters=[{"Key": "Path", "Option": "Recursive", "Values": [SSM_PREFIX.rstrip("/")]}]
    )
    names = []
    for page in pages:
        for param in page["Parameters"]:
            tags = {
                t["Key"]: t["Value"]
                for t in ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=param["Name"])["TagList"]
            }
            try:
                if _expiry(tags[TAG_EXPIRES]) <= now:
                    names.append(param["Name"])
            except (KeyError, ValueError):
                log.warning("SSM parameter %s: no readable %s tag; left alone", param["Name"], TAG_EXPIRES)
    return names


def reap(
    client: Any, dry_run: bool = False, now: datetime | None = None, waiter_delay_s: int = 15, ssm: Any = None
) -> list[Reaped]:
    """Terminate expired benchcamp nodes (and wait) and delete their engine secrets; returns what was
    (or would be) terminated. ``ssm`` defaults to a client in the EC2 client's region."""
    expired, warnings = expired_nodes(client, now)
    for w in warnings:
        log.warning(w)
    if expired and not dry_run:
        ids = [r.instance_id for r in expired]
        client.terminate_instances(InstanceIds=ids)
        client.get_waiter("instance_terminated").wait(
            InstanceIds=ids, WaiterConfig={"Delay": waiter_delay_s, "MaxAttempts": 80}
        )
        log.info("reaped %s", ", ".join(ids))
    if ssm is None:
        import boto3

        ssm = boto3.client("ssm", region_name=client.meta.region_name)
    names = sorted({parameter_name(r.execution_id) for r in expired} | set(expired_parameters(ssm, now)))
    for name in names:
        if dry_run:
            log.info("would delete SSM parameter %s", name)
        else:
            delete_parameter(ssm, name)
    return expired
