"""Small, versioned data files shipped inside the package (pricing profiles,
published baselines). Read with :func:`load_data`; callers get a fresh copy so
they can never mutate the shared parsed file."""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def _parsed(name: str) -> Any:
    res = resources.files(__name__).joinpath(name)
    if not res.is_file():
        raise FileNotFoundError(f"benchcamp/data/{name} is missing from the installed package")
    return yaml.safe_load(res.read_text(encoding="utf-8"))


def load_data(name: str) -> Any:
    """The parsed YAML file ``benchcamp/data/<name>`` (a deep copy)."""
    return copy.deepcopy(_parsed(name))
