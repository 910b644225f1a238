"""The overview page: the scheduler's health, the alerts with what to do, the agenda
(as `status` prints it) and the active runs (as `status --watch` shows them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scrinalia_workers.gateway.statements import web as sql
from scrinalia_workers.logs import one_line
from scrinalia_workers.presentation.advice import advice
from scrinalia_workers.presentation.agenda import AGENDA_HEADERS, max_run_time, next_run, scheduler_line, slot, span
from scrinalia_workers.presentation.fmt import utc
from scrinalia_workers.web.markup import Html, href, html, join
from scrinalia_workers.web.panels import Row, View, pager, read, section, table


def worker_link(name: str) -> Html:
    return html('<a href="{h}">{n}</a>', h=href("/worker", name=name), n=name)


def health(view: View) -> Html:
    got = read(view, "the scheduler's health", sql.HEALTH)
    if got.problem:
        body = got.problem
    elif not got.rows:
        body = html('<p class="failed">the health function returned no row</p>')
    else:
        h = got.rows[0]
        if h["healthy"]:
            body = html(
                '<p class="healthy">healthy: holder {r}, heartbeat {a} ago</p>',
                r=h["holder_role"],
                a=span(h["heartbeat_age"]),
            )
        else:
            body = html('<p class="unhealthy">NOT HEALTHY: {r}</p>', r=h["reason"])
    status = read(view, "who holds the scheduler's lock (scheduler_status)", sql.SCHEDULER_STATUS)
    if status.problem:
        body = join([body, status.problem])
    elif status.rows:
        try:
            body = join([body, html("<p>scheduler: {s}</p>", s=scheduler_line(status.rows[0]))])
        except Exception as e:  # noqa: BLE001 - the line is lost, never the page
            view.log("web_row_failed", level="error", panel="scheduler status", error=one_line(e))
    return section("Scheduler", body)


def alerts(view: View) -> Html:
    got = read(view, "the alerts", sql.ALERTS, {"n": view.page_size + 1})
    rows = got.rows[: view.page_size]

    def cells(a: Row) -> list[Any]:
        return [
            (a["kind"], "alert"),
            worker_link(a["worker_name"]) if a["worker_name"] else None,
            utc(a["since"]),
            a["message"],
            (advice(a["kind"]), "advice"),
        ]

    more = "" if len(got.rows) <= view.page_size else f"the first {view.page_size} shown"
    body = got.problem or table(
        view,
        "alerts",
        ["alert", "worker", "since", "what happened", "what to do"],
        rows,
        cells,
        "no alerts: nothing to do",
    )
    return section("Alerts", body, more or None)


def agenda(view: View, after: str, most: int | None) -> Html:
    got = read(view, "the agenda (worker_agenda)", sql.AGENDA_PAGE, {"after": after, "n": view.page_size + 1})
    rows = got.rows[: view.page_size]
    actions = view.actions

    def cells(a: Row) -> list[Any]:
        skipped = utc(a["last_skipped_at"])
        out: list[Any] = [
            worker_link(a["worker_name"]),
            a["cron"],
            a["timezone"],
            *next_run(a),
            ("yes", "paused") if a["paused"] else ("no" if a["scheduled"] else None),
            utc(a["last_enqueued_at"]),
            skipped,
            a["last_skip_reason"] if skipped else None,
            max_run_time(a),
            slot(a, most) if most else a["active_run_id"],
        ]
        if actions:
            forms = []
            if a["scheduled"]:
                forms.append(actions.form("resume" if a["paused"] else "pause", a["worker_name"]))
            forms.append(actions.form("enqueue", a["worker_name"], "run now"))
            out.append(join(forms))
        return out

    headers = list(AGENDA_HEADERS)
    if actions:
        headers.append("actions")
    body = got.problem or table(view, "agenda", headers, rows, cells, "no workers registered")
    nxt = href("/", after=rows[-1]["worker_name"]) if len(got.rows) > view.page_size else None
    return section(
        "Agenda", join([body, pager(nxt, "more workers")]), "when each worker runs next, in its zone and in UTC"
    )


def active_runs(view: View, now: datetime | None) -> Html:
    got = read(view, "the active runs (worker_run_history)", sql.ACTIVE_RUNS, {"n": view.page_size + 1})
    rows = got.rows[: view.page_size]
    actions = view.actions

    def wait(r: Row) -> str:
        if r["status"] == "RUNNING":
            left = span(r["lease_expires_at"] - now) if r["lease_expires_at"] and now else "-"
            return f"{r['lease_owner']}, lease {left}"
        if r["not_before"] and now and r["not_before"] > now:
            return f"retry in {span(r['not_before'] - now)}"
        return f"waiting {span(now - r['created_at']) if now else '-'} for a runner"

    def cells(r: Row) -> list[Any]:
        out: list[Any] = [
            f"#{r['run_id']}",
            worker_link(r["worker_name"]),
            (r["status"], r["status"]),
            r["trigger"],
            r["attempt_label"],
            wait(r),
        ]
        if actions:
            out.append(actions.form("cancel", r["run_id"]) if r["status"] == "QUEUED" else None)
        return out

    headers = ["run", "worker", "status", "trigger", "attempt", "lease / wait"] + (["actions"] if actions else [])
    more = None if len(got.rows) <= view.page_size else f"the first {view.page_size} shown"
    return section("Active runs", got.problem or table(view, "active runs", headers, rows, cells), more)


def overview(view: View, now: datetime | None, after: str, most: int | None) -> Html:
    return join([health(view), alerts(view), agenda(view, after, most), active_runs(view, now)])
