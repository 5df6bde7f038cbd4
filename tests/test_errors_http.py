"""One quoting of a server's error answer, shared by the load generator's records, the simulator
and the readiness check."""

from __future__ import annotations

import json

import pytest

from benchcamp.errors import MESSAGE_MAX, http_error_text
from benchcamp.loadgen.readiness import _Answer


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (json.dumps({"error": {"message": "bad  key\n", "type": "auth"}}), "HTTP 401: bad key"),
        (json.dumps({"detail": "Not Found"}), "HTTP 401: Not Found"),
        (json.dumps({"message": "slow down"}), "HTTP 401: slow down"),
        (json.dumps({"error": ""}), 'HTTP 401: {"error": ""}'),  # nothing to extract: the body itself
        ("<html>\n<b>gateway</b>\n</html>", "HTTP 401: <html> <b>gateway</b> </html>"),
        ("", "HTTP 401"),
        (" \r\n ", "HTTP 401"),  # the records' copy wrote "HTTP 401: " here
    ],
)
def test_the_servers_message_on_one_line(body, expected):
    assert http_error_text(401, body) == expected
    assert http_error_text(401, body.encode()) == expected
    assert _Answer(401, body.encode()).message() == expected  # what the readiness check reports


def test_a_long_message_is_cut():
    assert http_error_text(500, "x" * 5000) == "HTTP 500: " + "x" * MESSAGE_MAX


def test_no_answer_is_the_transport_error():
    assert _Answer(0, error="Connection refused").message() == "Connection refused"
