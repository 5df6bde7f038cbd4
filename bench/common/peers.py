"""The peers' clients for bench/ scripts: pinned installs in their own venvs under
~/.cache/benchcamp/peers/ (never the project's venv), and what they need offline.

- AIPerf (``aiperf==AIPERF_VERSION``), in ``~/.cache/benchcamp/peers/aiperf-<version>``, made
  with pyenv's Python 3.12 when there is one (else this Python).
- A tokenizer AIPerf can load with no model hub: a one-word-per-token WordLevel tokenizer
  (bench/loadgen_ceiling.make_tokenizer: the simulated engine counts a text prompt's words, so
  AIPerf's and the server's counts agree), placed in a private Hugging Face cache as the repo
  ``benchcamp/words`` and used with ``HF_HUB_OFFLINE=1``. A plain local path does not work for
  AIPerf 0.13.0's trace datasets: its prompt-synthesis subprocesses
  (``dataset/loader/parallel_convert.py``) set ``HF_HUB_OFFLINE=1`` and then resolve the name
  with ``snapshot_download(local_files_only=True)``, which rejects a path ("Repo id must be in
  the form 'repo_name' or 'namespace/repo_name'"), and the run ends with a BrokenProcessPool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

AIPERF_VERSION = "0.13.0"
PEERS = Path.home() / ".cache" / "benchcamp" / "peers"
TOKENIZER_REPO = "benchcamp/words"
_REV = "0" * 40


def pyenv_python(minor: str = "3.12") -> str:
    found = sorted((Path.home() / ".pyenv" / "versions").glob(f"{minor}*/bin/python"))
    return str(found[-1]) if found else sys.executable


def venv_exe(name: str, version: str, exe: str, python: str | None = None, extra: tuple[str, ...] = ()) -> Path:
    """``PEERS/<name>-<version>/bin/<exe>``, creating the venv and installing ``name==version`` once."""
    venv = PEERS / f"{name}-{version}"
    path = venv / "bin" / exe
    if not path.exists():
        PEERS.mkdir(parents=True, exist_ok=True)
        subprocess.run([python or pyenv_python(), "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{name}=={version}", *extra], check=True)
    return path


def aiperf_exe() -> Path:
    return venv_exe("aiperf", AIPERF_VERSION, "aiperf")


def aiperf_env(hf_home: Path) -> dict[str, str]:
    """The environment AIPerf runs in: the private HF cache, offline (nothing to download)."""
    return dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def aiperf_tokenizer(hf_home: Path) -> str:
    """Build the word tokenizer with AIPerf's own ``tokenizers`` into ``hf_home``'s hub cache
    (``models--benchcamp--words``, revision ``main``); returns the repo name to pass as --tokenizer."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loadgen_ceiling import make_tokenizer

    repo = hf_home / "hub" / f"models--{TOKENIZER_REPO.replace('/', '--')}"
    snap = repo / "snapshots" / _REV
    if not (snap / "tokenizer.json").exists():
        built = make_tokenizer(str(aiperf_exe().parent / "python"), hf_home / "words-build")
        if built is None:
            raise SystemExit("could not build a local tokenizer in AIPerf's venv")
        snap.mkdir(parents=True, exist_ok=True)
        for f in Path(built).iterdir():
            shutil.copy2(f, snap / f.name)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(_REV)
    return TOKENIZER_REPO
