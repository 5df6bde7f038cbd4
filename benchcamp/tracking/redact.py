"""What may leave the process as MLflow params, tags and config artifacts.

Secrets never reach MLflow. The config schema holds no secret values (API keys
come from the environment), but a key named like a secret is masked anyway, in
case the schema grows one, and so are the values that follow secret-looking
flags in argument lists (``engine.extra_args: ["--hf-token", "..."]``) and any
secret registered with :mod:`benchcamp.secrets`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from benchcamp.secrets import MASK, redact

# A key whose words (split on _ - .) include one of these names a secret
# (``hf_token``, ``aws_secret_access_key``; not ``max_num_batched_tokens``)...
_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential",
                           "credentials", "auth", "bearer", "private"})
# ...unless it only names where the secret lives (an env var, a key pair, a connection id).
_REFERENCE_SUFFIXES = ("_env", "_name", "_conn_id", "_file_env")
_WORD_SPLIT = re.compile(r"[_\-.\s]+")

MLFLOW_PARAM_VALUE_MAX = 6000


def _names_secret(name: str) -> bool:
    return any(w in _SECRET_WORDS for w in _WORD_SPLIT.split(name.lower()))


def is_secret_key(dotted_key: str) -> bool:
    last = dotted_key.rsplit(".", 1)[-1].lower()
    if last.endswith(_REFERENCE_SUFFIXES):
        return False
    return _names_secret(last)


def _is_secret_flag(text: str) -> bool:
    """``--api-key``, ``--hf-token``: argument-list flags whose next item (or ``=value``) is a secret."""
    return text.startswith("-") and _names_secret(text.lstrip("-"))


def argv_secrets(items: list[Any]) -> list[str]:
    """The secret values in an argument list: what :func:`mask_argv` would hide."""
    masked = mask_argv([str(i) for i in items])
    return [str(orig).partition("=")[2] if "=" in str(orig) and m.endswith("=" + MASK) else str(orig)
            for orig, m in zip(items, masked) if m != str(orig) and m.endswith(MASK)]


def mask_argv(items: list[Any]) -> list[Any]:
    """``["--api-key", "abc", "--hf-token=xyz"]`` -> ``["--api-key", "***", "--hf-token=***"]``."""
    out: list[Any] = []
    mask_next = False
    for item in items:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        text = str(item)
        flag, eq, _ = text.partition("=")
        if isinstance(item, str) and _is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(item)
                mask_next = True
            continue
        out.append(redact(item) if isinstance(item, str) else item)
    return out


def scrub(data: Any, prefix: str = "") -> Any:
    """A deep copy of a nested config dict with secret-named keys masked,
    secret flags in lists masked and registered secrets redacted."""
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
