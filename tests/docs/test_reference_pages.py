"""The docs site's reference pages are what the code gives now: scripts/docs/gen_reference.py writes them from the
config schema, the CLI's parser, benchcamp.errors, benchcamp.metrics and the layering table, and each committed
page must equal its output (the fix: rerun the script). Each page also covers its source whole: every config key,
every command, every exit code."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "reference"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_current(gen):
    assert gen.stale(PAGES) == [], "run `uv run --frozen python scripts/docs/gen_reference.py` and commit the pages"


def test_a_stale_or_missing_page_is_named(gen, tmp_path):
    shutil.copytree(PAGES, tmp_path, dirs_exist_ok=True)
    (tmp_path / "cli.md").write_text((tmp_path / "cli.md").read_text().replace("--fail-on-regression", "--x"))
    (tmp_path / "metrics.md").unlink()
    assert gen.stale(tmp_path) == ["cli.md", "metrics.md"]
    assert gen.main(["--check", "--out", str(tmp_path)]) == 1


def _keys(model, prefix=""):
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        yield f"{prefix}{name}"
        for sub in _models(field.annotation):
            if issubclass(sub, BaseModel):
                yield from _keys(sub, f"{prefix}{name}.")


def _models(annotation):
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def test_every_config_key_command_and_exit_code_is_on_its_page():
    from benchcamp.cli import build_parser
    from benchcamp.config import Config
    from benchcamp.errors import ExitCode

    config = (PAGES / "config.md").read_text()
    leaves = [k for k in _keys(Config) if k != "topology" and not k.endswith(("tiers",))]
    assert [k for k in leaves if f"`{k}`" not in config and f"## `{k}`" not in config] == []
    cli = (PAGES / "cli.md").read_text()
    commands = build_parser()._subparsers._group_actions[0].choices
    assert [c for c in commands if f"## `benchcamp {c}`" not in cli] == []
    assert "`--fail-on-regression`" in cli  # an option of `benchcamp run`
    codes = (PAGES / "exit-codes.md").read_text()
    assert [c.name for c in ExitCode if f"| {int(c)} | `{c.name}` |" not in codes] == []
