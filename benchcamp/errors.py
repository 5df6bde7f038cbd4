"""Every user-facing error, the one table of exit codes, and a server's error answer quoted in one line.

A user-facing error's message already names the field (or file) and the fix:
the CLI prints it in one line, with no traceback, and exits with its code.
Anything else is a bug and keeps its traceback. This module is a leaf: any
module may import it, so no error class drags in the module that raises it.
"""

from __future__ import annotations

import enum
import json


class ExitCode(enum.IntEnum):
    """`benchcamp` exit codes; the Airflow tasks map the same outcomes to task states."""

    OK = 0  # measured, no regression
    FAILED = 1  # a step failed, a point aborted, or nothing valid was measured
    BAD_INPUT = 2  # config, params file, workload, trace or endpoint settings to fix
    REGRESSION = 3  # measured fine, but a verdict is "regressed"
    INTERRUPTED = 130  # SIGINT/SIGTERM: what was measured is kept and marked interrupted


class BenchcampError(Exception):
    """Base of the errors whose message tells the user what to change."""

    exit_code: ExitCode = ExitCode.BAD_INPUT


class ConfigError(BenchcampError, ValueError):
    """A config problem, phrased as 'field: what is wrong; the fix'."""


class SpecError(BenchcampError, ValueError):
    """A workload spec problem, phrased as 'field: what is wrong; the fix'."""


class TraceError(BenchcampError, ValueError):
    """A malformed trace or workload file: names the file (and line) and the problem."""


class ProfileError(BenchcampError, ValueError):
    """A profile that does not exist or does not parse; the message names the fix."""


class StoreError(BenchcampError, RuntimeError):
    """A results-store problem; the message names results.store and the fix."""


class TrackingError(BenchcampError, RuntimeError):
    """A tracking problem phrased with what to do about it."""


class EndpointError(BenchcampError, RuntimeError):
    """The endpoint cannot be benchmarked (unreachable, key rejected, unknown model, unsupported API)."""


class EngineError(BenchcampError, RuntimeError):
    """The engine did not start or is not serving; the message has its last log lines."""

    exit_code = ExitCode.FAILED


class ProvisionError(BenchcampError, RuntimeError):
    """Provisioning failed; the message says what and how to fix it."""

    exit_code = ExitCode.FAILED


# -- a server's refusal, quoted in one line ---------------------------------------------------------------------
# Records, the load generator, the virtual-time simulator and the readiness check all quote a server's error answer
# the same way.

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
