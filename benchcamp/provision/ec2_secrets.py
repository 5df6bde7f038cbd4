"""Engine secrets of an EC2 deployment in SSM Parameter Store: one SecureString per execution.

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

import hashlib
import logging
import re
from typing import Any

from benchcamp.secrets import redaction

log = logging.getLogger(__name__)

SSM_PREFIX = "/benchcamp/engine-env/"
KEY_LINE = re.compile(r"^VLLM_API_KEY=(\S+)$", re.MULTILINE)  # the engine's key in an env file
UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def parameter_name(execution_id: str) -> str:
    """The SSM parameter holding the engine env of ``execution_id`` (SSM names allow [A-Za-z0-9_.-/];
    the digest keeps two ids that differ only in other characters apart)."""
    digest = hashlib.sha256(execution_id.encode()).hexdigest()[:8]
    return f"{SSM_PREFIX}{UNSAFE_NAME_CHARS.sub('_', execution_id)[:200]}-{digest}"


def env_file_text(env: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in env.items())


def read(ssm: Any, execution_id: str) -> str | None:
    """The execution's env file text from SSM (its secrets registered for redaction), or None."""
    from botocore.exceptions import ClientError

    try:
        value = ssm.get_parameter(Name=parameter_name(execution_id), WithDecryption=True)["Parameter"]["Value"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return None
        raise
    for line in value.splitlines():
        redaction.register(line.partition("=")[2])
    return str(value)


def stored_api_key(ssm: Any, execution_id: str) -> str | None:
    """The key an earlier attempt stored (its node, if launched, reads that one)."""
    value = read(ssm, execution_id)
    m = KEY_LINE.search(value) if value else None
    return m.group(1) if m else None


def store(ssm: Any, execution_id: str, env: dict[str, str], tags: list[dict[str, str]]) -> str:
    """Put the engine ``env`` (API key, HF token) in SSM as a SecureString; returns the parameter name.

    An existing parameter of this execution is kept as it is: a node launched by an earlier attempt
    has read it already."""
    name = parameter_name(execution_id)
    if read(ssm, execution_id) is not None:
        return name
    ssm.put_parameter(
        Name=name,
        Value=env_file_text(env),
        Type="SecureString",
        Tags=tags,
        Description=f"benchcamp engine env of {execution_id[:900]}",
    )
    log.info("engine secrets of %s stored in SSM parameter %s (SecureString)", execution_id, name)
    return name


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
