"""Secrets: where they hide, how engines get them, and redaction of everything that leaves the process.

One registry of the places a secret can be: flags whose value is a secret
(:data:`ENGINE_SECRET_FLAGS`, and any flag named like one), environment
variables (:data:`SECRET_ENV_VARS`, and any named like one), config keys named
like one (``*_token``, ``*_password``), and passwords inside URLs
(``scheme://user:pass@host``). :func:`register_config` finds the secrets a
config and this process's environment carry (one call per config, in the CLI
and in every Airflow task); :func:`redact` removes every registered secret and
every URL password from text that leaves the process: logs (a log-record
factory, installed on the first registration), argv shown, results files,
MLflow fields (:func:`safe_params`, :func:`scrub`) and reports.

Engines get secrets through their environment, never argv (``ps`` shows argv
to every local user): :func:`split_engine_secrets` turns ``--hf-token X`` into
``HF_TOKEN=X`` and ``--api-key X`` into ``VLLM_API_KEY=X``, the variables vLLM
itself reads. Each deployment gets a fresh random API key: a key that leaks is
worthless once the deployment is torn down. Inside Airflow, tasks/ also hands
the registered values to Airflow's own masker; benchcamp/ never imports airflow.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Mapping
from typing import Any

MASK = "***"
# Shorter strings would redact ordinary words; generated keys are 43 chars.
MIN_SECRET_LEN = 8
MLFLOW_PARAM_VALUE_MAX = 6000

# Secret flags of `vllm serve` and the environment variable vLLM reads instead (vllm/envs.py: VLLM_API_KEY;
# `--hf-token` is huggingface_hub's token, which it also takes from HF_TOKEN). argparse in vLLM accepts the
# underscore spellings too.
ENGINE_SECRET_FLAGS: dict[str, str] = {
    "--api-key": "VLLM_API_KEY",
    "--api_key": "VLLM_API_KEY",
    "--hf-token": "HF_TOKEN",
    "--hf_token": "HF_TOKEN",
}
# Environment variables whose value is a secret, besides any named like one (GITHUB_TOKEN, DB_PASSWORD).
SECRET_ENV_VARS = frozenset(
    {
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "VLLM_API_KEY",
        "OPENAI_API_KEY",
        "BENCHCAMP_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_TOKEN",
    }
)
# Named like a secret but not one: the shell's working directories ("pwd"); masking them hid every path.
_NOT_SECRET_ENV_VARS = frozenset({"PWD", "OLDPWD"})

# A key whose words (split on _ - . space) include one of these names a secret
# (``hf_token``, ``aws_secret_access_key``; not ``max_num_batched_tokens``)...
_SECRET_WORDS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "credential",
        "credentials",
        "auth",
        "bearer",
        "private",
    }
)
# ...unless it only names where the secret lives (an env var, a key pair, a connection id).
_REFERENCE_SUFFIXES = ("_env", "_name", "_conn_id", "_file_env", "_ref")
_WORD_SPLIT = re.compile(r"[_\-.\s]+")
# The password of ``scheme://user:password@host``: up to the last @ before the path.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<pw>[^\s/]*)(?P<at>@)")

_known: set[str] = set()
_lock = threading.Lock()
_log_factory_installed = False


# -- registry ----------------------------------------------------------------


def new_api_key() -> str:
    """A fresh URL-safe key (256 bits), registered for redaction."""
    key = secrets.token_urlsafe(32)
    register(key)
    return key


def register(secret: str | None) -> None:
    """Remember ``secret`` so that :func:`redact` (and every log record) hides it."""
    if secret and len(secret) >= MIN_SECRET_LEN:
        with _lock:
            _known.add(secret)
        _install_log_redaction()


# Named like a secret but not one: vLLM's prefill chunk cap (a number of tokens), as flag and config key.
_NOT_SECRET_NAMES = frozenset({"long_prefill_token_threshold"})


def _names_secret(name: str) -> bool:
    name = name.lower()
    if name.replace("-", "_") in _NOT_SECRET_NAMES:
        return False
    return any(w in _SECRET_WORDS for w in _WORD_SPLIT.split(name))


def is_secret_key(dotted_key: str) -> bool:
    """A config key (or env var name) that holds a secret: ``x.hf_token``, not ``x.api_key_env``."""
    last = dotted_key.rsplit(".", 1)[-1].lower()
    if last.endswith(_REFERENCE_SUFFIXES):
        return False
    return _names_secret(last)


def is_secret_flag(text: str) -> bool:
    """``--api-key``, ``--hf-token``: argument-list flags whose next item (or ``=value``) is a secret."""
    flag = text.partition("=")[0]
    return flag.startswith("-") and (flag in ENGINE_SECRET_FLAGS or _names_secret(flag.lstrip("-")))


def is_secret_env(name: str) -> bool:
    """A listed variable, or one whose last word names a secret (GITHUB_TOKEN; not SSH_AUTH_SOCK or
    AWS_ACCESS_KEY_ID, whose values are paths and identifiers that would mask ordinary text)."""
    if name.upper() in _NOT_SECRET_ENV_VARS:
        return False
    return name.upper() in SECRET_ENV_VARS or _WORD_SPLIT.split(name.lower())[-1] in _SECRET_WORDS


def url_passwords(text: str) -> list[str]:
    """The passwords in ``scheme://user:password@host`` URLs inside ``text``."""
    return [m.group("pw") for m in _URL_PASSWORD.finditer(text) if m.group("pw")]


def env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Secret values in an environment: secret variables, and passwords in URLs (MLFLOW_TRACKING_URI)."""
    environ = os.environ if environ is None else environ
    found: list[str] = []
    for name, value in environ.items():
        if is_secret_env(name):
            found.append(value)
        found.extend(url_passwords(value))
    return [v for v in dict.fromkeys(found) if len(v) >= MIN_SECRET_LEN]


def register_config(data: object) -> list[str]:
    """Register every secret a config (dict), an argument list or a run's params carries, plus the
    secret environment variables of this process, and return them.

    Values after secret flags in lists (``engine.extra_args: [--hf-token, hf_...]``), values of
    secret-named keys, passwords in URLs, and the value of an env var a ``*_env`` key names
    (``provider.endpoint.api_key_env``). The one call each process (CLI, Airflow task) makes per config
    it handles; Airflow tasks also hand the returned values to Airflow's masker.
    """
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, str) and is_secret_key(str(k)):
                    found.append(v)
                elif (
                    isinstance(v, str)
                    and str(k).lower().endswith("_env")
                    and is_secret_key(str(k)[:-4])
                    and os.environ.get(v)
                ):
                    found.append(os.environ[v])
                else:
                    walk(v)
        elif isinstance(node, (list, tuple)):
            found.extend(argv_secrets(list(node)))
            for v in node:
                walk(v)
        elif isinstance(node, str):
            found.extend(url_passwords(node))

    walk(data)
    found.extend(env_secrets())
    # A short value ("none") would mask ordinary words.
    values = [v for v in dict.fromkeys(found) if len(v) >= MIN_SECRET_LEN]
    for value in values:
        register(value)
    return values


# -- references (where a secret lives; resolved by benchcamp.secrets.refs) ----------

USER_SCHEMES = ("env", "file", "airflow-variable", "airflow-conn")
REF_PATTERN = re.compile(r"^(?P<scheme>[a-z][a-z0-9-]*):(?P<rest>.+)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_AIRFLOW_ID = re.compile(r"^[A-Za-z0-9_.\-/]+$")
EXAMPLES = "env:NAME, file:/path (mode 600), airflow-variable:KEY or airflow-conn:ID"


def check_ref(field: str, ref: str) -> str:
    """``ref`` if it is a well-formed user reference; else a ConfigError that names ``field`` and the
    forms it takes, and never echoes the value (it may be the secret itself)."""
    m = REF_PATTERN.match(ref or "")
    ok = bool(m) and m is not None and m.group("scheme") in USER_SCHEMES
    if ok and m is not None:
        scheme, rest = m.group("scheme"), m.group("rest")
        ok = {
            "env": bool(_ENV_NAME.match(rest)),
            "file": rest.startswith("/"),
        }.get(scheme, bool(_AIRFLOW_ID.match(rest)))
    if not ok:
        from benchcamp.errors import ConfigError

        raise ConfigError(
            f"{field}: expected a reference to where the secret lives ({EXAMPLES}), not the secret itself; "
            "put the value in that place and name it here"
        )
    return ref


# -- refusal (where a stored copy would outlive the run) -------------------------

_FIX_HF = (
    "put the token in an Airflow Variable (or connection, or a secrets backend) and set "
    "engine.hf_token_ref=airflow-variable:KEY (or airflow-conn:ID, env:NAME on the workers, file:/path) instead"
)
_FIX_API_KEY = (
    "remove it: each deployment makes its own key (provider local, ec2), an endpoint's key comes from the "
    "Airflow connection named by provider.endpoint.airflow_conn_id"
)
_FIX_URL = (
    "remove the password from the URL: give it to the workers' environment (MLFLOW_TRACKING_PASSWORD, "
    "an AWS profile) or an Airflow connection (provider.endpoint.airflow_conn_id for an endpoint's key)"
)
_FIX_KEY = "config keys take references, not secrets: engine.hf_token_ref, provider.endpoint.airflow_conn_id"


def literal_secrets(data: object, path: str = "") -> list[str]:
    """Where ``data`` (a config, a run's conf or params) holds a secret value itself, as
    ``"<location>: <fix>"`` lines that never contain the value: a secret flag with a value in a list
    (``engine.extra_args: [--hf-token, hf_...]``), a secret-named key with a value, a URL password."""
    found: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            where = f"{path}.{k}" if path else str(k)
            if is_secret_key(str(k)) and isinstance(v, str) and v:
                found.append(f"{where}: {_FIX_KEY}")
            else:
                found.extend(literal_secrets(v, where))
    elif isinstance(data, (list, tuple)):
        items = list(data)
        for i, item in enumerate(items):
            text = str(item)
            if is_secret_flag(text) and ("=" in text or _takes_value(items, i)):
                flag = text.partition("=")[0]
                fix = _FIX_HF if flag.lstrip("-").replace("_", "-") == "hf-token" else _FIX_API_KEY
                found.append(f"{path or 'arguments'}: {flag} takes a secret; {fix}")
        for i, item in enumerate(items):
            if isinstance(item, (dict, list, tuple)):
                found.extend(literal_secrets(item, f"{path}[{i}]"))
            elif isinstance(item, str) and url_passwords(item):
                found.append(f"{path}[{i}]: a password in a URL; {_FIX_URL}")
    elif isinstance(data, str) and url_passwords(data):
        found.append(f"{path or 'value'}: a password in a URL; {_FIX_URL}")
    return list(dict.fromkeys(found))


# -- redaction ----------------------------------------------------------------


def redact(text: str, extra: list[str | None] | tuple[str | None, ...] = ()) -> str:
    """``text`` with every registered secret (and ``extra`` ones) and every URL password replaced by ***."""
    with _lock:
        values = set(_known)
    values.update(s for s in extra if s and len(s) >= MIN_SECRET_LEN)
    # Longest first, so a secret containing another is replaced whole.
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, MASK)
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}{m.group('at')}" if m.group("pw") else m.group(0), text)


def mask_tail(secret: str | None) -> str:
    """A printable hint that identifies a key without revealing it."""
    if not secret:
        return "(none)"
    return f"{MASK}{secret[-4:]}" if len(secret) >= 16 else MASK


def _takes_value(items: list[Any], i: int) -> bool:
    """Whether ``items[i+1]`` is the value of the flag at ``i`` (``--hf-token`` alone means "the stored token")."""
    return i + 1 < len(items) and not (isinstance(items[i + 1], str) and items[i + 1].startswith("--"))


def mask_argv(items: list[Any]) -> list[Any]:
    """``["--api-key", "abc", "--hf-token=xyz"]`` -> ``["--api-key", "***", "--hf-token=***"]``."""
    out: list[Any] = []
    mask_next = False
    for i, item in enumerate(items):
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if isinstance(item, str) and is_secret_flag(item):
            flag, eq, _ = item.partition("=")
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(item)
                mask_next = _takes_value(items, i)
            continue
        out.append(redact(item) if isinstance(item, str) else item)
    return out


def argv_secrets(items: list[Any]) -> list[str]:
    """The secret values in an argument list: what :func:`mask_argv` hides after secret flags."""
    found: list[str] = []
    for i, item in enumerate(items):
        text = str(item)
        if not is_secret_flag(text):
            continue
        _flag, eq, value = text.partition("=")
        if eq:
            found.append(value)
        elif _takes_value(items, i):
            found.append(str(items[i + 1]))
    return [v for v in found if v]


def split_engine_secrets(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """(``argv`` without its secret flags, the environment that carries them instead).

    ``--hf-token X`` -> ``HF_TOKEN=X``, ``--api-key X`` -> ``VLLM_API_KEY=X`` (what vLLM reads). A bare
    ``--hf-token`` (use the stored login) stays. Any other secret-looking flag has no variable the engine
    would read, so it is an error rather than a secret in ``ps``.
    """
    from benchcamp.errors import ConfigError

    out: list[str] = []
    env: dict[str, str] = {}
    i = 0
    while i < len(argv):
        item = argv[i]
        if not is_secret_flag(item):
            out.append(item)
            i += 1
            continue
        flag, eq, value = item.partition("=")
        if not eq and _takes_value(argv, i):
            value, i = argv[i + 1], i + 1
        i += 1
        if not eq and not value:
            out.append(item)
            continue
        if flag not in ENGINE_SECRET_FLAGS:
            raise ConfigError(
                f"engine.extra_args: {flag} would put a secret in the engine's argv (visible in ps); "
                "remove it and pass the secret in the engine's environment"
            )
        register(value)
        env[ENGINE_SECRET_FLAGS[flag]] = value
    return out, env


def scrub(data: Any, prefix: str = "") -> Any:
    """A deep copy of a nested config dict with secret-named keys masked,
    secret flags in lists masked and registered secrets and URL passwords redacted."""
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            key = f"{prefix}{k}"
            out[k] = MASK if is_secret_key(key) and v not in (None, "", [], {}) else scrub(v, key + ".")
        return out
    if isinstance(data, list):
        return [scrub(v, prefix) for v in mask_argv(data)]
    if isinstance(data, str):
        return redact(data)
    return data


def safe_params(flat: dict[str, Any]) -> dict[str, str]:
    """Flattened config -> MLflow params: secrets masked, values as bounded strings.

    List values arrive as JSON text (``Config.flat``); their items are checked too.
    """
    out: dict[str, str] = {}
    for key, value in flat.items():
        if is_secret_key(key) and value not in (None, "", "[]", "{}"):
            out[key] = MASK
            continue
        if isinstance(value, str) and value.startswith("["):
            try:
                value = json.dumps(mask_argv(json.loads(value)))
            except (ValueError, TypeError):
                pass
        text = redact("" if value is None else str(value))
        out[key] = text if len(text) <= MLFLOW_PARAM_VALUE_MAX else text[: MLFLOW_PARAM_VALUE_MAX - 3] + "..."
    return out


# -- logs ----------------------------------------------------------------------


def _install_log_redaction() -> None:
    """Every log record of this process is redacted, whatever handler writes it (a factory, not a
    filter: filters sit on handlers that libraries and Airflow add later)."""
    global _log_factory_installed
    with _lock:
        if _log_factory_installed:
            return
        _log_factory_installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # a bad format string: the handler reports it as usual
            return record
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return record

    logging.setLogRecordFactory(factory)
