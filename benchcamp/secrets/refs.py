"""Secret references: where a secret lives, never the secret itself.

Configs, XCom and every other record of a campaign carry references; the step that needs a
value resolves it at run time, in its own process (:func:`resolve`), and the value goes no
further than that process and the engine's environment.

References (``scheme:rest``):

- ``env:NAME``: the environment variable NAME of the process that resolves it (a worker).
- ``file:/abs/path``: the file's content (one trailing newline dropped); the file must be
  readable by its owner only (``chmod 600``).
- ``airflow-variable:KEY``: an Airflow Variable, looked up through Airflow's secrets backends
  (environment ``AIRFLOW_VAR_*``, HashiCorp Vault, AWS Secrets Manager, ..., then the metadata
  database); ``airflow-conn:ID``: the password of an Airflow connection (same lookup order).
  benchcamp/ never imports airflow: tasks/ installs these two resolvers
  (:func:`install_resolver`); elsewhere they fail with one line.

The deployment's API key is referenced too (:func:`deployment_key_ref`, resolved by
benchcamp.deploy.keys.deployment_api_key): ``engine-env:PID:CREATE_TIME`` (a local engine: the key lives only
in that process's environment, read from ``/proc`` by the same user on the same machine),
``ec2:EXECUTION_ID`` (the execution's SSM SecureString, or the node's user data), or one of the
references above (an endpoint: its Airflow connection or ``provider.endpoint.api_key_env``).

Every resolved value is registered for redaction (benchcamp.secrets.redaction) and handed to the sinks
tasks/ installs (Airflow's masker, :func:`add_sink`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchcamp.errors import ConfigError
from benchcamp.secrets import redaction
from benchcamp.secrets.redaction import EXAMPLES, REF_PATTERN, USER_SCHEMES, check_ref

__all__ = ["EXAMPLES", "USER_SCHEMES", "check_ref"]

Resolver = Callable[[str], "str | None"]
_resolvers: dict[str, Resolver] = {}
_sinks: list[Callable[[str], None]] = []


def install_resolver(scheme: str, fn: Resolver) -> None:
    """Let :func:`resolve` look ``scheme:`` references up with ``fn`` (tasks/ installs the Airflow ones)."""
    _resolvers[scheme] = fn


def add_sink(fn: Callable[[str], None]) -> None:
    """Every value resolved from now on is also handed to ``fn`` (tasks/: Airflow's ``mask_secret``)."""
    if fn not in _sinks:
        _sinks.append(fn)


def _publish(value: str | None) -> str | None:
    if value:
        redaction.register(value)
        for sink in _sinks:
            sink(value)
    return value or None


def _read_file(field: str, path: str) -> str:
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{field}: file:{path} cannot be read ({exc.strerror}); create it with mode 600") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{field}: file:{path} is readable by others (mode {oct(mode & 0o777)}); chmod 600 it")
    return text[:-1] if text.endswith("\n") else text


def resolve(ref: str | None, field: str = "secret reference") -> str | None:
    """The value ``ref`` points to (None for an empty reference); a ConfigError naming ``field`` when
    the place is empty or missing. The value is registered for redaction (and the sinks)."""
    if not ref:
        return None
    m = REF_PATTERN.match(ref)
    if not m:
        raise ConfigError(f"{field}: {ref!r} is not a reference; expected {EXAMPLES}")
    scheme, rest = m.group("scheme"), m.group("rest")
    if scheme == "env":
        value = os.environ.get(rest)
        if not value:
            raise ConfigError(f"{field}: environment variable {rest} is not set on this worker; set it there")
        return _publish(value)
    if scheme == "file":
        return _publish(_read_file(field, rest))
    fn = _resolvers.get(scheme)
    if fn is None:
        raise ConfigError(
            f"{field}: {scheme}: references are resolved inside Airflow tasks only; here use env:NAME or file:/path"
        )
    value = fn(rest)
    if not value:
        raise ConfigError(f"{field}: {ref} is empty or does not exist; create it (it must hold the secret)")
    return _publish(value)


def engine_secret_env(hf_token_ref: str | None) -> dict[str, str]:
    """The engine's secret environment from the config's references: ``engine.hf_token_ref`` ->
    ``HF_TOKEN`` (what vLLM, through huggingface_hub, reads)."""
    token = resolve(hf_token_ref, "engine.hf_token_ref")
    return {"HF_TOKEN": token} if token else {}


# -- the deployment's API key ---------------------------------------------------

_in_process: dict[str, str] = {}


def keep_in_process(value: str) -> str:
    """A reference (``process:<n>``) to a key handed to this process directly, resolvable only here."""
    ref = f"process:{len(_in_process)}"
    _in_process[ref] = value
    return ref


def deployment_key_ref(kind: str, handle: dict[str, Any], endpoint_ref: str | None = None) -> str | None:
    """Where a later step (sweep, stop) finds the key of a deployment of ``kind``."""
    if kind == "local" and handle.get("pid"):
        return f"engine-env:{handle['pid']}:{handle.get('create_time', 0)}"
    if kind == "ec2":
        return f"ec2:{handle.get('execution_id', '')}"
    if kind == "endpoint":
        return endpoint_ref
    return None


def in_process(ref: str) -> str | None:
    """The key :func:`keep_in_process` kept under ``ref`` (None: it was handed to another process)."""
    return _in_process.get(ref)


def publish(value: str | None) -> str | None:
    """Register a resolved value for redaction and hand it to the sinks (Airflow's masker)."""
    return _publish(value)
