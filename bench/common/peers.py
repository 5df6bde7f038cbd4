"""The peers' clients for bench/ scripts: pinned installs in their own venvs under
~/.cache/benchcamp/peers/ (never the project's venv), and what they need offline.

- AIPerf (``aiperf==AIPERF_VERSION``), SemiAnalysis' AgentX harness (``agentx-harness==AGENTX_HARNESS_VERSION``,
  an AIPerf fork whose ``agentx`` CLI (and ``aiperf``) takes ``--scenario agentx|inferencex-agentx-mvp``; Python 3.11; the full
  install, beside scripts/agentx_harness/fetch.sh's loader-only ``agentx-harness-<version>-loader``), aiconfigurator (``AICONFIGURATOR_VERSION``, Python 3.11) and GuideLLM (``guidellm==GUIDELLM_VERSION``), each in
  ``~/.cache/benchcamp/peers/<name>-<version>``, made with pyenv's Python 3.12 when there is one
  (else this Python); agentperf-local (``AGENTPERF_VERSION``) with a Python >= 3.12.
- A tokenizer AIPerf can load with no model hub: a one-word-per-token WordLevel tokenizer
  (``make_tokenizer``: the simulated engine counts a text prompt's words, so AIPerf's and the
  server's counts agree), placed in a private Hugging Face cache as the repo
  ``benchcamp/words`` and used with ``HF_HUB_OFFLINE=1``. A plain local path does not work for
  AIPerf 0.13.0's trace datasets: its prompt-synthesis subprocesses
  (``dataset/loader/parallel_convert.py``) set ``HF_HUB_OFFLINE=1`` and then resolve the name
  with ``snapshot_download(local_files_only=True)``, which rejects a path ("Repo id must be in
  the form 'repo_name' or 'namespace/repo_name'"), and the run ends with a BrokenProcessPool.
- tiktoken's ``o200k_base`` for agentperf-local, rebuilt offline from the npm registry's
  ``tiktoken`` package (``tiktoken_cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.common.paths import PEERS

AIPERF_VERSION = "0.13.0"
GUIDELLM_VERSION = "0.8.1"
AGENTPERF_VERSION = "0.3.4"
AGENTX_HARNESS_VERSION = "1.0.12"  # SemiAnalysis' AgentX harness (Apache-2.0)
AICONFIGURATOR_VERSION = "0.12.0"  # NVIDIA's planner (Apache-2.0); its core is pinned in uv.lock too
TOKENIZER_REPO = "benchcamp/words"
_REV = "0" * 40
TIKTOKEN_NPM = "tiktoken@1.0.22"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def pyenv_python(minor: str = "3.12") -> str:
    found = sorted((Path.home() / ".pyenv" / "versions").glob(f"{minor}*/bin/python"))
    return str(found[-1]) if found else sys.executable


def python312() -> str | None:
    """A Python >= 3.12 (pyenv's, else this one), or None."""
    for exe in (pyenv_python("3.12"), pyenv_python("3.13"), sys.executable, shutil.which("python3.12") or ""):
        if not exe:
            continue
        r = subprocess.run([exe, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True,
                           text=True)
        if r.stdout.strip() == "True":
            return exe
    return None


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


def agentx_harness_exe() -> Path:
    """The harness's ``agentx`` CLI: AIPerf's commands (``agentx_cli.py``: ``app.update(aiperf_app)``), with
    ``profile`` defaulting to ``--scenario agentx`` when none is given; the ``aiperf`` beside it is the same
    fork without that default."""
    return venv_exe("agentx-harness", AGENTX_HARNESS_VERSION, "agentx", python=pyenv_python("3.11"))


def aiconfigurator_exe() -> Path:
    return venv_exe("aiconfigurator", AICONFIGURATOR_VERSION, "aiconfigurator", python=pyenv_python("3.11"))


def guidellm_exe() -> Path:
    return venv_exe("guidellm", GUIDELLM_VERSION, "guidellm")


def agentperf_exe() -> Path | None:
    py = python312()
    if py is None:
        return None
    return venv_exe("agentperf-local", AGENTPERF_VERSION, "agentperf-local", python=py)


def offline_env(hf_home: Path | None = None) -> dict[str, str]:
    """A peer's environment: no model hub (and with ``hf_home``, that private HF cache)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if hf_home is not None:
        env["HF_HOME"] = str(hf_home)
    return env


def make_tokenizer(python: str, where: Path) -> str | None:
    """A tiny WordLevel tokenizer directory (AutoTokenizer-loadable), built with the peer's own
    `tokenizers`; no model hub is reachable."""
    code = f"""
from tokenizers import Tokenizer, models, pre_tokenizers
import json, os
vocab = {{"[UNK]": 0, "<s>": 1, "</s>": 2}}
for i in range(5000):
    vocab[f"w{{i}}"] = len(vocab)
for w in "the a of to and in is it that for on with as was at by an be this are or from tok".split():
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
d = {str(where)!r}
os.makedirs(d, exist_ok=True)
tok.save(os.path.join(d, "tokenizer.json"))
json.dump({{"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
           "eos_token": "</s>", "model_max_length": 1000000}}, open(os.path.join(d, "tokenizer_config.json"), "w"))
json.dump({{"model_type": "gpt2", "vocab_size": len(vocab)}}, open(os.path.join(d, "config.json"), "w"))
"""
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return str(where) if r.returncode == 0 else None


def hub_tokenizer(exe: Path, hf_home: Path) -> str:
    """Build the word tokenizer with the peer's own ``tokenizers`` (``exe``'s venv) into ``hf_home``'s hub
    cache (``models--benchcamp--words``, revision ``main``); returns the repo name to pass as --tokenizer."""
    repo = hf_home / "hub" / f"models--{TOKENIZER_REPO.replace('/', '--')}"
    snap = repo / "snapshots" / _REV
    if not (snap / "tokenizer.json").exists():
        built = make_tokenizer(str(exe.parent / "python"), hf_home / "words-build")
        if built is None:
            raise SystemExit(f"could not build a local tokenizer in {exe.parent.parent}")
        snap.mkdir(parents=True, exist_ok=True)
        for f in Path(built).iterdir():
            shutil.copy2(f, snap / f.name)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(_REV)
    return TOKENIZER_REPO


def aiperf_tokenizer(hf_home: Path) -> str:
    return hub_tokenizer(aiperf_exe(), hf_home)


def o200k_bytes(encoder_json: Path) -> bytes:
    """``o200k_base.tiktoken`` from js-tiktoken's ``encoders/o200k_base.json``: its
    ``bpe_ranks`` lines are ``<prefix> <offset> <b64> <b64> ...`` (rank = offset + position);
    the .tiktoken file is ``<b64> <rank>`` per line in rank order."""
    ranks: dict[str, int] = {}
    for line in json.loads(encoder_json.read_text())["bpe_ranks"].split("\n"):
        if line:
            _, off, *toks = line.split(" ")
            for i, t in enumerate(toks):
                ranks[t] = int(off) + i
    return "".join(f"{t} {r}\n" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])).encode()


def tiktoken_cache() -> Path | None:
    """A TIKTOKEN_CACHE_DIR holding o200k_base, rebuilt from npm's ``tiktoken`` (sha256-checked), under the
    name tiktoken/load.py looks for (sha1 of the blob URL); None without npm."""
    cache = PEERS / "tiktoken-cache"
    target = cache / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256:
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    if shutil.which("npm") is None:
        print(f"no npm here to fetch {TIKTOKEN_NPM}: agentperf-local will download o200k_base itself")
        return None
    with tempfile.TemporaryDirectory(dir=cache) as d:
        subprocess.run(["npm", "pack", "--silent", TIKTOKEN_NPM], cwd=d, check=True, capture_output=True)
        tgz = next(Path(d).glob("tiktoken-*.tgz"))
        with tarfile.open(tgz) as tf:
            member = tf.extractfile("package/encoders/o200k_base.json")
            assert member is not None
            (Path(d) / "o200k.json").write_bytes(member.read())
        data = o200k_bytes(Path(d) / "o200k.json")
    got = hashlib.sha256(data).hexdigest()
    if got != O200K_SHA256:
        raise SystemExit(f"o200k_base rebuilt from {TIKTOKEN_NPM} has sha256 {got}, tiktoken pins {O200K_SHA256}")
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(target)
    return cache
