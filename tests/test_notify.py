"""benchcamp.verdicts.notify: targets, the message, and email through a real SMTP conversation on
loopback (a minimal SMTP server in this file: no mail server is installed here)."""

from __future__ import annotations

import socketserver
import threading

import pytest

from benchcamp.verdicts import notify


class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP for smtplib: greeting, EHLO, MAIL, RCPT, DATA, QUIT."""

    def handle(self) -> None:
        self.wfile.write(b"220 localhost ready\r\n")
        while line := self.rfile.readline():
            verb = line[:4].upper()
            if verb == b"EHLO":
                self.wfile.write(b"250 localhost\r\n")
            elif verb == b"DATA":
                self.wfile.write(b"354 go on\r\n")
                body = b"".join(iter(self.rfile.readline, b".\r\n"))
                self.server.received.append(body.decode())  # type: ignore[attr-defined]
                self.wfile.write(b"250 queued\r\n")
            elif verb == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


@pytest.fixture
def smtp_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SmtpHandler)
    server.received = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_email_carries_every_problem(smtp_server):
    text = notify.message("benchcamp campaign benchcamp_nightly run scheduled__x",
                          notify.problems_from_error("campaign failed:\n  matrix[0] (base): deprovision: refused"))
    notify.send_email("oncall@example.com", text, notify.Smtp("127.0.0.1", smtp_server.server_address[1]))
    (mail,) = smtp_server.received
    assert "To: oncall@example.com" in mail
    assert "Subject: benchcamp campaign benchcamp_nightly run scheduled__x failed:" in mail
    assert "- matrix[0] (base): deprovision: refused" in mail


@pytest.mark.parametrize("target", ["pager:x", "email:", "slack", ""])
def test_a_bad_target_names_the_choices(target):
    with pytest.raises(ValueError, match="log, email:<address> or slack:<conn_id>"):
        notify.parse_target(target)


def test_a_webhook_that_is_not_https_is_refused_before_sending():
    with pytest.raises(ValueError, match="https://"):
        notify.send_slack("http://hooks.example.com/T000/B000/XXX", "text")
