"""The run history (as `runs` and `runs WORKER` print it, with each run's place in its
retry chain) and a worker's page: its schedule (as `schedule get`), its scheduled
periods with their attempts (as `runs WORKER --timeline`) and its runs."""

from __future__ import annotations

import json
from typing import Any

from scrinalia_workers.gateway.statements import web as sql
from scrinalia_workers.presentation.agenda import active_run, last_skipped_words, next_run_words, span
from scrinalia_workers.presentation.fmt import duration, utc
from scrinalia_workers.web.markup import Html, href, html, join
from scrinalia_workers.web.overview import worker_link
from scrinalia_workers.web.panels import Row, View, pager, read, section, table

PERIODS = 10  # the timeline's scheduled periods, as `runs WORKER --timeline` shows by default
FINISHED = ("SUCCEEDED", "FAILED", "INTERRUPTED", "CANCELLED")


def runs_table(view: View, what: str, rows: list[Row]) -> Html:
    actions = view.actions if view.actions and view.actions.rerun else None

    def cells(r: Row) -> list[Any]:
        out: list[Any] = [
            f"#{r['run_id']}",
            worker_link(r["worker_name"]),
            r["trigger"],
            (r["status"], r["status"]),
            r["attempt_label"],
            r["retry_of"] and f"retry of #{r['retry_of']}",
            r["retried_by"] and f"retried by #{r['retried_by']}",
            utc(r["scheduled_for"]),
            utc(r["not_before"]),
            utc(r["created_at"]),
            utc(r["finished_at"]),
            duration(r["duration"]),
            r["error"],
        ]
        if actions:
            out.append(actions.form("rerun", r["run_id"], "re-run") if r["status"] in FINISHED else None)
        return out

    headers = [
        "id",
        "worker",
        "trigger",
        "status",
        "attempt",
        "retry of",
        "retried by",
        "period",
        "not before",
        "created",
        "finished",
        "duration",
        "error",
    ] + (["actions"] if actions else [])
    return table(view, what, headers, rows, cells, "no runs")


def _before(text: str | None) -> int:
    """The page's keyset: run ids below this one (the first page: all)."""
    if text and text.isdigit() and 0 < int(text) < 2**63:
        return int(text)
    return 2**63 - 1


def runs_page(view: View, before: str | None) -> Html:
    got = read(
        view,
        "the run history (worker_run_history)",
        sql.RUNS_PAGE,
        {"before": _before(before), "n": view.page_size + 1},
    )
    rows = got.rows[: view.page_size]
    nxt = href("/runs", before=rows[-1]["run_id"]) if len(got.rows) > view.page_size else None
    body = got.problem or runs_table(view, "runs", rows)
    return section(
        "Runs", join([body, pager(nxt, "older runs")]), "newest first; each attempt of a retry chain is a row"
    )


def _schedule(view: View, a: Row, most: int | None) -> Html:
    nxt = next_run_words(a)
    skipped = last_skipped_words(a)
    fields = [
        ("cron", a["cron"]),
        ("timezone", a["timezone"]),
        ("enabled", None if not a["scheduled"] else ("no (paused)" if a["paused"] else "yes")),
        ("next run", nxt),
        ("request", json.dumps(a["request"], ensure_ascii=False) if a["request"] is not None else None),
        ("last enqueued", utc(a["last_enqueued_at"]) and f"{utc(a['last_enqueued_at'])} (run #{a['last_run_id']})"),
        ("last skipped", skipped),
        ("active run", active_run(a, most) if most else a["active_run_id"]),
        ("updated", a["updated_at"] and f"{utc(a['updated_at'])} by {a['updated_by'] or '-'}"),
    ]
    items = join(html("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in fields)
    forms = Html("")
    if view.actions:
        parts = [view.actions.form("resume" if a["paused"] else "pause", a["worker_name"])] if a["scheduled"] else []
        parts.append(view.actions.form("enqueue", a["worker_name"], "run now"))
        forms = html("<p>{f}</p>", f=join(parts))
    return section("Schedule", join([html("<dl>{i}</dl>", i=items), forms]))


def _timeline(view: View, worker: str) -> Html:
    got = read(view, "the timeline (worker_timeline)", sql.WORKER_TIMELINE, {"w": worker, "periods": PERIODS})
    if got.problem:
        return section("Scheduled periods", got.problem)
    periods: dict[Any, list[Row]] = {}
    for r in got.rows:
        periods.setdefault(r["scheduled_for"], []).append(r)
    parts = []
    for when, attempts in periods.items():
        prev_end: dict[str, Any] = {"at": None}

        def cells(r: Row, when: Any = when, prev_end: dict[str, Any] = prev_end) -> list[Any]:
            started = f"{span(r['started_at'] - when)} after the period" if r["started_at"] else "not started"
            backoff = None
            if r["retry_of"] and prev_end["at"] and r["not_before"]:
                backoff = span(r["not_before"] - prev_end["at"])
            prev_end["at"] = r["finished_at"]
            return [
                r["attempt_label"],
                f"#{r['run_id']}",
                (r["status"], r["status"]),
                started,
                backoff,
                span(r["duration"]) if r["duration"] else None,
                r["error"],
            ]

        last = attempts[-1]["status"]
        verdict = f"{last} after {len(attempts)} attempt(s)" if last in FINISHED else f"{last}, attempt {len(attempts)}"
        parts.append(
            html(
                '<div class="period"><h3>period {p}: <span class="{s}">{v}</span></h3>{t}</div>',
                p=utc(when),
                s=last,
                v=verdict,
                t=table(
                    view,
                    "timeline",
                    ["attempt", "run", "status", "started", "backoff before it", "took", "error"],
                    attempts,
                    cells,
                ),
            )
        )
    body = join(parts) if parts else html('<p class="none">no scheduled runs yet</p>')
    return section("Scheduled periods", body, f"the last {PERIODS} periods, newest first, each with its attempts")


def worker_page(view: View, worker: str, before: str | None, most: int | None) -> tuple[int, Html]:
    """(HTTP status, body): 404 for a worker the agenda does not know."""
    got = read(view, "the agenda (worker_agenda)", sql.WORKER_AGENDA, {"w": worker})
    if got.problem:
        schedule = section("Schedule", got.problem)
    elif not got.rows:
        return 404, section("Unknown worker", html('<p class="failed">no worker is named {w}</p>', w=worker))
    else:
        schedule = _schedule(view, got.rows[0], most)
    n = view.page_size + 1
    if before is None:
        runs = read(view, "the runs (worker_runs)", sql.WORKER_RUNS, {"w": worker, "n": n})
    else:
        runs = read(
            view,
            "the runs (worker_run_history)",
            sql.WORKER_RUNS_PAGE,
            {"w": worker, "before": _before(before), "n": n},
        )
    rows = runs.rows[: view.page_size]
    nxt = href("/worker", name=worker, before=rows[-1]["run_id"]) if len(runs.rows) > view.page_size else None
    history = section(
        "Runs", join([runs.problem or runs_table(view, "worker runs", rows), pager(nxt, "older runs")]), "newest first"
    )
    return 200, join([schedule, _timeline(view, worker), history])
