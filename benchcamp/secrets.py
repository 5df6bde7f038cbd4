"""API keys for engine deployments, and redaction of known secrets from text.

Each deployment gets a fresh random key: a key that leaks (a log line, a
screenshot) is worthless once the deployment is torn down. ``redact`` removes
every registered secret from text that leaves the process (engine logs copied
as artifacts, error messages). Inside Airflow, tasks/ also registers each key
with Airflow's own secrets masker; benchcamp/ never imports airflow.
"""

from __future__ import annotations

import secrets as _secrets
import threading

MASK = "***"
# Shorter strings would redact ordinary words; generated keys are 43 chars.
MIN_SECRET_LEN = 8

_known: set[str] = set()
_lock = threading.Lock()


def new_api_key() -> str:
    """A fresh URL-safe key (256 bits), registered for redaction."""
    key = _secrets.token_urlsafe(32)
    register(key)
    return key


def register(secret: str | None) -> None:
    """Remember ``secret`` so that :func:`redact` removes it from text."""
    if secret and len(secret) >= MIN_SECRET_LEN:
        with _lock:
            _known.add(secret)


def redact(text: str, extra: list[str | None] | tuple[str | None, ...] = ()) -> str:
    """``text`` with every registered secret (and ``extra`` ones) replaced by ***."""
    with _lock:
        values = set(_known)
    values.update(s for s in extra if s and len(s) >= MIN_SECRET_LEN)
    # Longest first, so a secret containing another is replaced whole.
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def mask_tail(secret: str | None) -> str:
    """A printable hint that identifies a key without revealing it."""
    if not secret:
        return "(none)"
    return f"{MASK}{secret[-4:]}" if len(secret) >= 16 else MASK


def register_config(data: object) -> list[str]:
    """Register every secret a config (dict), an argument list or a run's params carries, and return them.

    Values after secret flags in lists (``engine.extra_args: [--hf-token, hf_...]``) and values of
    secret-named keys. The one call each process (CLI, Airflow task) makes per config it handles;
    Airflow tasks also hand the returned values to Airflow's masker.
    """
    from benchcamp.tracking.redact import argv_secrets, is_secret_key

    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, str) and is_secret_key(str(k)):
                    if len(v) >= MIN_SECRET_LEN:  # a short value ("none") would mask ordinary words
                        found.append(v)
                else:
                    walk(v)
        elif isinstance(node, (list, tuple)):
            found.extend(s for s in argv_secrets(list(node)) if len(s) >= MIN_SECRET_LEN)
            for v in node:
                walk(v)

    walk(data)
    for value in found:
        register(value)
    return list(dict.fromkeys(found))
