"""MkDocs hooks of the docs site (mkdocs.yml `hooks:`).

- The reference pages (docs/reference/{config,cli,exit-codes,metrics}.md) are generated from the code by
  scripts/docs/gen_reference.py and committed; the build fails when one is not what the code gives now.
- CHANGELOG.md stays at the repository's root (where a reader of the repository looks for it) and is published as
  changelog.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_reference  # noqa: E402  (beside this file, importable once its folder is on the path)


def on_pre_build(config: Any) -> None:
    stale = gen_reference.stale(Path(config["docs_dir"]) / "reference")
    if stale:
        raise PluginError(
            f"docs/reference/{', '.join(stale)} not what the code gives now: "
            "run `uv run --frozen python scripts/docs/gen_reference.py` and commit the pages"
        )


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "changelog.md", abs_src_path=str(ROOT / "CHANGELOG.md")))
    return files
