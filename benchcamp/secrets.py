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
