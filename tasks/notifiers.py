"""Failure notifications of a campaign: log, email, or a Slack incoming webhook.

Attached as the verdict task's ``on_failure_callback`` (dags/campaign.py), it
lists the problems the verdict raised. ``target`` (the DAG's ``notify`` param): ``log`` | ``email:<address>`` |
``slack:<conn_id>``, where the Airflow connection's password (or host) holds
the webhook URL, so the URL (a secret) never sits in a DAG or a param.
Email uses the SMTP server of the ``smtp_default`` connection.
"""

from __future__ import annotations

import json
import logging
import smtplib
import urllib.request
from email.message import EmailMessage

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)


class CampaignNotifier(BaseNotifier):
    template_fields = ("target", "problems")

    def __init__(self, target: str = "log", problems: list[str] | None = None):
        super().__init__()
        self.target = target
        self.problems = list(problems or [])

    def message(self, context) -> str:
        dag_id = context["dag"].dag_id if context.get("dag") else "?"
        return f"benchcamp campaign {dag_id} run {context.get('run_id', '?')} failed:\n" + "\n".join(
            f"- {p}" for p in self.problems or self._from_failure(context)
        )

    @staticmethod
    def _from_failure(context) -> list[str]:
        """As an on_failure_callback: the failed task's problems (one per line of its error)."""
        exc = context.get("exception")
        lines = [ln.strip() for ln in str(exc or "").splitlines() if ln.strip()]
        return lines[1:] if len(lines) > 1 and lines[0].endswith(":") else lines or ["(no details)"]

    def notify(self, context) -> None:
        text = self.message(context)
        kind, _, arg = self.target.partition(":")
        if kind == "log":
            log.error(text)
        elif kind == "email":
            self._email(arg, text)
        elif kind == "slack":
            self._slack(arg, text)
        else:
            raise ValueError(f"notify={self.target!r}: use log, email:<address> or slack:<conn_id>")

    @staticmethod
    def _slack(conn_id: str, text: str) -> None:
        from airflow.sdk import Connection

        conn = Connection.get(conn_id)
        url = conn.password or conn.host
        if not url or not str(url).startswith("https://"):
            raise ValueError(f"connection {conn_id}: put the Slack webhook URL (https://...) in its password")
        req = urllib.request.Request(
            url, data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    @staticmethod
    def _email(address: str, text: str) -> None:
        from airflow.sdk import Connection

        conn = Connection.get("smtp_default")
        msg = EmailMessage()
        msg["Subject"] = text.splitlines()[0]
        msg["From"] = conn.login or "benchcamp@localhost"
        msg["To"] = address
        msg.set_content(text)
        with smtplib.SMTP(conn.host or "localhost", conn.port or 25, timeout=20) as s:
            if conn.password:
                s.starttls()
                s.login(conn.login, conn.password)
            s.send_message(msg)
