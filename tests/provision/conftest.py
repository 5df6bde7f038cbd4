"""moto's EC2 for the provider tests (no AWS account is reachable here)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

REGION = "us-east-1"


@pytest.fixture
def ec2(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


PROFILE = "benchcamp-engine"


@pytest.fixture
def instance_profile(ec2):
    """An instance profile in moto's IAM (run_instances checks that it exists) for secrets_via=ssm."""
    iam = boto3.client("iam", region_name=REGION)
    iam.create_role(RoleName=PROFILE, AssumeRolePolicyDocument='{"Version": "2012-10-17", "Statement": []}')
    iam.create_instance_profile(InstanceProfileName=PROFILE)
    iam.add_role_to_instance_profile(InstanceProfileName=PROFILE, RoleName=PROFILE)
    return PROFILE
