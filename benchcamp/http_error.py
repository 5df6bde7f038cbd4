"""A server's error answer in one line, for records and for the readiness check alike.

A leaf module (stdlib only): ``benchcamp.results.records``, the load generator, the virtual-time
simulator and ``benchcamp.readiness`` all quote a refusal the same way.
"""

from __future__ import annotations

import json

MESSAGE_MAX = 300  # characters of the server's message kept (a body can be a whole HTML page)


def server_message(body: str | bytes) -> str:
    """The server's own message, on one line: the message of an OpenAI-style
    (``{"error": {"message"}}``) or FastAPI-style (``{"detail"}``) body, else the body itself;
    at most MESSAGE_MAX characters, "" when the body says nothing."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error", doc.get("detail", doc.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err:
            text = str(err)
    return " ".join(text.split())[:MESSAGE_MAX]


def http_error_text(status: int, body: str | bytes) -> str:
    """A failed response as a record's ``error``: ``HTTP <status>: <the server's message>``,
    or ``HTTP <status>`` when the body says nothing."""
    message = server_message(body)
    return f"HTTP {status}: {message}" if message else f"HTTP {status}"
