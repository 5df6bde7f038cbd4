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
