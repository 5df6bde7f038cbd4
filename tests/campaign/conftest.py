"""Fixtures of the campaign tests (helpers: campaign_support.py)."""

from __future__ import annotations

import pytest
from campaign_support import tiny_config


@pytest.fixture
def tiny(tmp_path):
    return tiny_config(tmp_path)
