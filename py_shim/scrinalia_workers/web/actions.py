"""The operator's actions, offered only with --allow-actions to an operator login:
pause, resume, enqueue, cancel, and re-run where the database has scrinalia.rerun.

Each is a POST form carrying this process's token (a secret made at start-up, never
stored); a POST is done only when its token matches and its Origin is the page's own
(the Host it was sent to). The calls are the CLI's (statements/web.py).
"""

from __future__ import annotations

import hmac
import secrets
import socket
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.gateway.statements import web as sql
from scrinalia_workers.logs import one_line
from scrinalia_workers.web.markup import Html, html

# action: (statement, the form field it takes, what it did)
ACTIONS: dict[str, tuple[str, str, str]] = {
    "pause": (sql.SET_SCHEDULE_ENABLED, "worker", "paused the schedule of {}"),
    "resume": (sql.SET_SCHEDULE_ENABLED, "worker", "resumed the schedule of {} (re-armed from the cron)"),
    "enqueue": (sql.ENQUEUE, "worker", "enqueued a manual run of {}"),
    "cancel": (sql.CANCEL_RUN, "run", "cancelled run #{}"),
    "rerun": (sql.RERUN, "run", "re-ran run #{}"),
}
MAX_FIELD = 200  # a worker name or a run id; anything longer is not ours


class Refused(Exception):
    """A POST that is not done: (HTTP status, the reason, shown to the person)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Actions:
    token: str
    rerun: bool  # scrinalia.rerun exists here and this login may call it

    @classmethod
    def new(cls, rerun: bool) -> Actions:
        return cls(secrets.token_urlsafe(32), rerun)

    def form(self, action: str, value: Any, label: str | None = None) -> Html:
        if action == "rerun" and not self.rerun:
            return Html("")
        field = ACTIONS[action][1]
        return html(
            '<form method="post" action="/action" class="act">'
            '<input type="hidden" name="csrf" value="{t}">'
            '<input type="hidden" name="action" value="{a}">'
            '<input type="hidden" name="{f}" value="{v}">'
            '<button type="submit">{l}</button></form>',
            t=self.token,
            a=action,
            f=field,
            v=value,
            l=label or action,
        )

    def check(self, fields: dict[str, str], origin: str | None, host: str | None) -> tuple[str, str]:
        """(action, its argument), or Refused: a missing or wrong token, a foreign
        Origin, an unknown action, a malformed argument."""
        if not hmac.compare_digest(fields.get("csrf", "").encode(), self.token.encode()):
            raise Refused(403, "refused: this form's token is not this server's (reload the page)")
        if not origin or not host or origin != f"http://{host}":
            raise Refused(403, "refused: the request did not come from this server's own page (Origin)")
        action = fields.get("action", "")
        if action not in ACTIONS:  # (whether re-run exists is the login's, asked per request)
            raise Refused(400, "refused: no such action here")
        value = fields.get(ACTIONS[action][1], "")
        if not value or len(value) > MAX_FIELD or (ACTIONS[action][1] == "run" and not value.isdigit()):
            raise Refused(400, f"refused: {ACTIONS[action][1]} is missing or malformed")
        return action, value

    def run(self, conn: psycopg.Connection[Any], action: str, value: str, client: str) -> str:
        """Does it; returns what was done. A refusal of the database's (SW010 busy, SW011
        not cancellable, a missing grant) is raised as Refused with its one line."""
        statement, field, done = ACTIONS[action]
        params: dict[str, Any] = {"by": who(client)}
        if field == "run":
            params["run"] = int(value)
        else:
            params["w"] = value
            params["enabled"] = action == "resume"
        try:
            row = conn.cursor(row_factory=dict_row).execute(statement, params).fetchone()
        except psycopg.Error as e:
            state = f"[{e.sqlstate}] " if e.sqlstate else ""
            code = 403 if e.sqlstate == "42501" else 409
            raise Refused(code, f"{state}{one_line(e.diag.message_primary or e)}") from None
        text = done.format(value)
        if action in ("enqueue", "rerun") and row and row.get("run_id"):
            text += f": run #{row['run_id']}"
        return text


def who(client: str) -> str:
    """Who the ledger records for an action of the web view: this host and the browser's address."""
    return f"web:{socket.gethostname()}<-{client}"[:200]
