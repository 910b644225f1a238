"""The lines of a tick's decisions: armed, enqueued (and catch-up), skipped, tick refused.
Whether an enqueued run is a catch-up is the tick's answer (its catch_up column): the
shim writes what SQL decided, and infers nothing.

log_decision() says what each line holds. A spike logs a line per decision, and the
general path (a record per line, then its fields joined one by one) was most of the
pass's own Python once the cron was computed; so decision_text() writes the usual
lines of a chunk itself, in one pass with one timestamp (the instant the chunk's lines
were formatted, after its commit): the same fields, in log_decision's order and
EventLog's encoding, so each line reads exactly as through Lines. What is unusual (a
refusal; in plain text a value that is not printable, as any a terminal could act on
is; a log quieter than info) goes through log_decision and Lines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from scrinalia_workers.logs import LEVELS, EventLog, Lines, stamp

Row = dict[str, Any]
CATCH_UP_REASON = "periods were missed: one run, not a replay"
_CATCH_UP_JSON = _quote(CATCH_UP_REASON)


def _iso(t: datetime) -> str:
    """A next occurrence as the lines write it: thousands of decisions share a few."""
    return _iso_at(t, t.utcoffset())  # (equal instants at other offsets read otherwise)


@functools.lru_cache(maxsize=4096)
def _iso_at(t: datetime, offset: timedelta | None) -> str:
    return t.isoformat()


def log_decision(log: Callable[..., None], r: Row, cron_tz: tuple[str, str]) -> None:
    """The log line of one tick decision (armed, enqueued and maybe catch-up, refused,
    skipped)."""
    nxt = _iso(r["next_run_at"]) if r["next_run_at"] else None
    sched_for = r["scheduled_for"]
    sched_iso = sched_for.isoformat() if sched_for else None
    if r["decision"] == "ARMED":
        log("armed", worker=r["worker_name"], next_run_at=nxt)
    elif r["decision"] == "REFUSED":
        # the SQL and this shim disagree on the cron: the schedule is set aside (an
        # alert, and health names it) and tried again later; the others went on
        log(
            "tick refused",
            level="error",
            worker=r["worker_name"],
            cron=cron_tz[0],
            timezone=cron_tz[1],
            scheduled_for=sched_iso,
            reason=r["reason"],
        )
    elif r["decision"] == "ENQUEUED":
        catch_up = bool(r["catch_up"])
        log(
            "enqueued",
            worker=r["worker_name"],
            run_id=r["run_id"],
            scheduled_for=sched_iso,
            next_run_at=nxt,
            catch_up=catch_up,
        )
        if catch_up:
            log(
                "catch-up",
                worker=r["worker_name"],
                run_id=r["run_id"],
                scheduled_for=sched_iso,
                reason=CATCH_UP_REASON,
            )
    else:
        log(
            "skipped",
            worker=r["worker_name"],
            scheduled_for=sched_iso,
            next_run_at=nxt,
            reason=r["reason"],
        )


def decision_text(
    log: EventLog,
    columns: list[str],
    decided: list[tuple],
    crons: dict[str, tuple[str, str]],
) -> str:
    """The lines of a chunk's decisions (rows of `columns`, in their order), as Lines
    would write log_decision's lines of them."""
    if not decided:
        return ""
    general = Lines(log)
    if LEVELS["info"] < log.threshold:  # (only the refusals are said)
        for r in decided:
            row = dict(zip(columns, r))
            log_decision(general, row, crons[row["worker_name"]])
        return general.text()
    w, d, rid, sf, nx, rs, cu = (
        columns.index(c)
        for c in ("worker_name", "decision", "run_id", "scheduled_for", "next_run_at", "reason", "catch_up")
    )
    as_json = log.json_lines
    ts = stamp()
    head = f'{{"ts": "{ts}", "event": "' if as_json else f"{ts} INFO "
    out: list[str] = []
    for r in decided:
        decision, worker, nxt, sched_for = r[d], r[w], r[nx], r[sf]
        usual = nxt is not None and (
            decision == "ARMED"
            or (sched_for is not None and decision != "REFUSED" and (decision != "ENQUEUED" or r[rid] is not None))
        )
        # (plain text: a value a terminal could act on, a newline included, is never
        # printable, and Lines escapes it)
        if not usual or (not as_json and not (worker.isprintable() and (r[rs] is None or r[rs].isprintable()))):
            log_decision(general, dict(zip(columns, r)), crons[worker])
            out.append(general.text())
            continue
        n = _iso(nxt)
        if decision == "ARMED":
            if as_json:
                out.append(f'{head}armed", "level": "info", "worker": {_quote(worker)}, "next_run_at": "{n}"}}\n')
            else:
                out.append(f"{head}armed worker={worker} next_run_at={n}\n")
            continue
        s = _iso(sched_for)
        if decision == "ENQUEUED":
            run_id = int(r[rid])
            catch_up = bool(r[cu])
            if as_json:
                q = _quote(worker)
                out.append(
                    f'{head}enqueued", "level": "info", "worker": {q}, "run_id": {run_id}, '
                    f'"scheduled_for": "{s}", "next_run_at": "{n}", "catch_up": {"true" if catch_up else "false"}}}\n'
                )
                if catch_up:
                    out.append(
                        f'{head}catch-up", "level": "info", "worker": {q}, "run_id": {run_id}, '
                        f'"scheduled_for": "{s}", "reason": {_CATCH_UP_JSON}}}\n'
                    )
            else:
                out.append(
                    f"{head}enqueued worker={worker} run_id={run_id} scheduled_for={s} next_run_at={n} "
                    f"catch_up={catch_up}\n"
                )
                if catch_up:
                    out.append(
                        f"{head}catch-up worker={worker} run_id={run_id} scheduled_for={s} reason={CATCH_UP_REASON}\n"
                    )
            continue
        reason = r[rs]
        if as_json:
            out.append(
                f'{head}skipped", "level": "info", "worker": {_quote(worker)}, "scheduled_for": "{s}", '
                f'"next_run_at": "{n}", "reason": {"null" if reason is None else _quote(reason)}}}\n'
            )
        else:
            out.append(f"{head}skipped worker={worker} scheduled_for={s} next_run_at={n} reason={reason}\n")
    return "".join(out)
