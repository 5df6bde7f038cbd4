"""The campaign's failure notifier (benchcamp.verdicts.notify does the sending).

Attached as ``on_failure_callback`` of resolve_config and verdict (dags/campaign.py).
``target`` (the DAG's ``notify`` param): ``log`` | ``email:<address>`` (SMTP server of the
``smtp_default`` connection) | ``slack:<conn_id>`` (the connection's password, or host,
holds the webhook URL, so the URL, a secret, never sits in a DAG or a param).
"""

from __future__ import annotations

from airflow.sdk import BaseNotifier, Connection

from benchcamp.verdicts import notify


class CampaignNotifier(BaseNotifier):
    template_fields = ("target", "problems")

    def __init__(self, target: str = "log", problems: list[str] | None = None):
        super().__init__()
        self.target = target
        self.problems = list(problems or [])

    def message(self, context) -> str:
        dag_id = context["dag"].dag_id if context.get("dag") else "?"
        problems = self.problems or notify.problems_from_error(context.get("exception"))
        return notify.message(f"benchcamp campaign {dag_id} run {context.get('run_id', '?')}", problems)

    def notify(self, context) -> None:
        kind, arg = notify.parse_target(self.target)
        text = self.message(context)
        if kind == "log":
            notify.log.error(text)
        elif kind == "email":
            conn = Connection.get("smtp_default")
            smtp = notify.Smtp(conn.host or "localhost", conn.port or 25, conn.login, conn.password)
            notify.send_email(arg, text, smtp)
        else:
            conn = Connection.get(arg)
            notify.send_slack(str(conn.password or conn.host or ""), text)
