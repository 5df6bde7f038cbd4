"""Failure notifications of a campaign: one message, to a log, an email address or a Slack
incoming webhook. No Airflow here: the DAG's notifier (tasks/notifiers.py) resolves the
Airflow connections that hold the SMTP server and the webhook URL (a secret) and calls
:func:`send`."""

from __future__ import annotations

import json
import logging
import smtplib
import urllib.request
from dataclasses import dataclass
from email.message import EmailMessage

log = logging.getLogger(__name__)
TARGETS = "log, email:<address> or slack:<conn_id>"


@dataclass(frozen=True)
class Smtp:
    host: str = "localhost"
    port: int = 25
    login: str | None = None
    password: str | None = None


def parse_target(target: str) -> tuple[str, str]:
    """``log`` | ``email:<address>`` | ``slack:<conn_id>`` -> (kind, argument)."""
    kind, _, arg = target.partition(":")
    if kind not in ("log", "email", "slack") or (kind != "log" and not arg):
        raise ValueError(f"notify={target!r}: use {TARGETS}")
    return kind, arg


def message(title: str, problems: list[str]) -> str:
    return f"{title} failed:\n" + "\n".join(f"- {p}" for p in problems or ["(no details)"])


def problems_from_error(error: object) -> list[str]:
    """A failed task's problems, one per line of its error ('campaign failed:' heading dropped)."""
    lines = [ln.strip() for ln in str(error or "").splitlines() if ln.strip()]
    return lines[1:] if len(lines) > 1 and lines[0].endswith(":") else lines


def send_slack(url: str, text: str) -> None:
    if not url.startswith("https://"):
        raise ValueError("the Slack webhook URL must start with https:// (put it in the connection's password)")
    req = urllib.request.Request(
        url, data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def send_email(address: str, text: str, smtp: Smtp) -> None:
    msg = EmailMessage()
    msg["Subject"] = text.splitlines()[0]
    msg["From"] = smtp.login or "benchcamp@localhost"
    msg["To"] = address
    msg.set_content(text)
    with smtplib.SMTP(smtp.host, smtp.port, timeout=20) as s:
        if smtp.password:
            s.starttls()
            s.login(smtp.login or "", smtp.password)
        s.send_message(msg)
