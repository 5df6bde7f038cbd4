"""The reaper: terminate benchcamp nodes whose ``benchcamp:expires-at`` has passed.

The last line of defence against a node left running by a crashed
orchestrator (the nightly DAG runs it; also ``benchcamp reap``). Only
instances carrying both benchcamp tags are considered; an unparseable expiry is
reported and left alone rather than guessed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from benchcamp.provision.ec2 import TAG_EXECUTION, TAG_EXPIRES

log = logging.getLogger(__name__)


@dataclass
class Reaped:
    instance_id: str
    execution_id: str
    expires_at: str
    state: str


def expired_nodes(client: Any, now: datetime | None = None) -> tuple[list[Reaped], list[str]]:
    """(expired benchcamp instances, warnings about unreadable expiry tags)."""
    now = now or datetime.now(timezone.utc)
    pages = client.get_paginator("describe_instances").paginate(Filters=[
        {"Name": "tag-key", "Values": [TAG_EXPIRES]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ])
    expired, warnings = [], []
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                if TAG_EXECUTION not in tags:
                    continue
                try:
                    when = datetime.fromisoformat(tags[TAG_EXPIRES])
                    if when.tzinfo is None:
                        when = when.replace(tzinfo=timezone.utc)
                except ValueError:
                    warnings.append(f"{inst['InstanceId']}: {TAG_EXPIRES}={tags[TAG_EXPIRES]!r} is not ISO 8601; left running")
                    continue
                if when <= now:
                    expired.append(Reaped(inst["InstanceId"], tags[TAG_EXECUTION], tags[TAG_EXPIRES],
                                          inst["State"]["Name"]))
    return expired, warnings


def reap(client: Any, dry_run: bool = False, now: datetime | None = None,
         waiter_delay_s: int = 15) -> list[Reaped]:
    """Terminate expired benchcamp nodes (and wait); returns what was (or would be) terminated."""
    expired, warnings = expired_nodes(client, now)
    for w in warnings:
        log.warning(w)
    if expired and not dry_run:
        ids = [r.instance_id for r in expired]
        client.terminate_instances(InstanceIds=ids)
        client.get_waiter("instance_terminated").wait(
            InstanceIds=ids, WaiterConfig={"Delay": waiter_delay_s, "MaxAttempts": 80})
        log.info("reaped %s", ", ".join(ids))
    return expired
