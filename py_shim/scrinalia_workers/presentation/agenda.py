"""An agenda row's parts and the scheduler's line, as `status`, `schedule get`,
`status --watch` and the web view print them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scrinalia_workers.presentation.fmt import brief, duration, in_zone, utc
from scrinalia_workers.text import HIDDEN

# The agenda's columns, as `status` prints them and the web view shows them.
AGENDA_HEADERS = (
    "worker",
    "cron",
    "zone",
    "next run (zone)",
    "next run (UTC)",
    "paused",
    "last enqueued",
    "last skipped",
    "skip reason",
    "max run time",
    "active run (or owed retry)",
)

# How many of the agenda's workers status prints (its --limit), what needs an operator
# first (agenda_focus()); the totals count every worker, and `status --all`, the web
# view or `schedule get WORKER` show the rest. `status --watch` fits a screen.
AGENDA_SHOWN = 50
WATCH_AGENDA_SHOWN = 20

# agenda_totals()'s concerns, in agenda_focus()'s order, as the totals line names them
CONCERNS = (
    ("overdue", "overdue"),
    ("set_aside", "set aside"),
    ("overrunning", "overrunning"),
    ("retry_owed", "retry owed"),
    ("starved", "starved"),
    ("unclaimed", "unclaimed"),
)


def totals_line(t: dict[str, Any]) -> str:
    """The agenda's totals (agenda_totals(), counted on the server) in one line."""
    concerns = [f"{t[key]:,} {words}" for key, words in CONCERNS if t[key]]
    return (
        f"{t['workers']:,} workers, {t['scheduled']:,} scheduled ({t['paused']:,} paused, "
        f"{t['awaiting_arm']:,} awaiting arm); runs: {t['running']:,} running, {t['queued']:,} queued; "
        + ("needs an operator: " + ", ".join(concerns) if concerns else "nothing needs an operator")
    )


def max_run_time(a: dict[str, Any]) -> str | None:
    """The worker's maximum run time (worker_agenda, 0.5 on): a RUNNING run past it is
    ended by the scheduler's pass."""
    return duration(a.get("max_run_time"))


def scheduler_line(s: dict[str, Any]) -> str:
    if s["lock_held"]:
        app = s["holder_application"]
        holder = f"application {HIDDEN}" if app is None else (app or "no application name")
        where = f" from {s['holder_client']}" if s["holder_client"] else ""
        since = utc(s["holder_backend_start"]) or HIDDEN
        line = f"lock held by pid {s['holder_pid']} (role {s['holder_role'] or HIDDEN}, {holder}{where}, connected {since})"
        if s["heartbeat_pid"] != s["holder_pid"]:
            line += " -- NOT a scheduler: it has written no heartbeat"
    else:
        line = "NO scheduler holds the lock: nothing is ticking"
    if s["last_tick_at"]:
        line += f"; last tick {utc(s['last_tick_at'])} by {s['last_tick_by'] or '-'} ({s['ticks']} ticks)"
    else:
        line += "; never ticked"
    return line


def next_run(a: dict[str, Any]) -> tuple[str | None, str | None]:
    """(in the schedule's zone, in UTC), or what stands in for them."""
    if not a["scheduled"]:
        return "unscheduled", "unscheduled"
    if a["paused"]:
        return "paused", "-"
    if a["arm_error"]:
        return f"SET ASIDE: {brief(a['arm_error'], 60)}", utc(a["arm_retry_at"])
    if a["awaiting_arm"]:
        return "not armed yet", "-"
    return in_zone(a["next_run_at"], a["timezone"]), utc(a["next_run_at"])


def active_run(a: dict[str, Any], most: int) -> str | None:
    """An agenda row's active run in a few words, or None when the slot is free."""
    if a["active_run_id"] is None:
        return None
    s = f"#{a['active_run_id']} {a['active_status']} {a['active_trigger']}"
    if a["active_trigger"] == "SCHEDULE":
        s += f" {a['active_attempt']}/{most}"
    if a["active_not_before"] and a["active_not_before"] > datetime.now(UTC):
        s += f" not before {utc(a['active_not_before'])}"
    return s


def slot(a: dict[str, Any], most: int) -> str | None:
    """The active run, or else the failed attempt whose owed retry holds the slot."""
    run = active_run(a, most)
    if run is not None or a.get("owed_by_run_id") is None:
        return run
    return (
        f"#{a['owed_by_run_id']} {a['owed_by_status']} {a['owed_attempt'] - 1}/{most}: "
        f"owed retry {a['owed_attempt']}/{most} since {utc(a['owed_since'])} (the scheduler creates it)"
    )


def span(d: timedelta | float | None) -> str:
    """A duration at a glance: 45s, 12m05s, 3h20m, 2d04h; negative as 'overdue 12s'."""
    if d is None:
        return "-"
    s = d.total_seconds() if isinstance(d, timedelta) else float(d)
    if s < 0:
        return "overdue " + span(-s)
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def next_run_words(a: dict[str, Any]) -> str:
    """A schedule's next run in one field (schedule get, the web's worker page): in its
    zone and in UTC, or why there is none."""
    if not a.get("scheduled", True):
        return "unscheduled"
    if a["paused"]:
        return "paused"
    if a.get("arm_error"):
        return f"SET ASIDE: {a['arm_error']} (next try {utc(a['arm_retry_at'])})"
    if a["awaiting_arm"]:
        return "not armed yet (the scheduler computes it at its next tick)"
    return f"{in_zone(a['next_run_at'], a['timezone'])} ({utc(a['next_run_at'])})"


def last_skipped_words(a: dict[str, Any]) -> str | None:
    """When the last period was skipped, and why."""
    skipped = utc(a["last_skipped_at"])
    if skipped and a["last_skip_reason"]:
        skipped += f" ({a['last_skip_reason']})"
    return skipped
