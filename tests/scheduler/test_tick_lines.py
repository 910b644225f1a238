"""A pass's decision lines are formatted and written by a thread while the next chunk
runs in the database: the same lines as one by one, every one written before the pass
returns (or raises), none dropped, none able to act on a terminal."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from helpers import due_yearly, lock_holding_scheduler, make_workers
from scrinalia_workers.errors import LockLost
from scrinalia_workers.logs import EventLog, Lines
from scrinalia_workers.scheduler import decision_lines, tick
from scrinalia_workers.scheduler.occurrences import Occurrences

# hostile text as a database value may hold it: a forged line, escapes, a bidi override
HOSTILE = "w\n2026-12-04T00:00:00.000+00:00 INFO enqueued worker=forged\x1b[2J\r\u202e\x9b\u2028end"
FIELDS = [
    ("enqueued", "info", {"worker": HOSTILE, "run_id": 7, "scheduled_for": "2026-12-04T22:00:00+00:00"}),
    ("skipped", "info", {"worker": "plain", "reason": "run #12 is active", "next_run_at": None}),
    ("tick refused", "error", {"worker": "x", "cron": "0 0 30 2 *", "catch_up": False}),
    ("armed", "info", {}),
    ("debugged", "debug", {"worker": "below the threshold"}),
]


def _write(lines: Lines) -> None:
    """As a pass writes a chunk's lines: their text, through the log."""
    text = lines.text()
    if text:
        lines.log.write_text(text, flush=True)


def _strip_ts(text: str, as_json: bool) -> list:
    if as_json:
        return [{k: v for k, v in json.loads(x).items() if k != "ts"} for x in text.splitlines()]
    return [re.sub(r"^\S+ ", "", x) for x in text.splitlines()]


@pytest.mark.parametrize("as_json", [False, True])
def test_lines_are_the_lines_written_one_by_one(as_json):
    one, many = io.StringIO(), io.StringIO()
    single = EventLog(json_lines=as_json, stream=one)
    lines = Lines(EventLog(json_lines=as_json, stream=many))
    for event, level, fields in FIELDS:
        single(event, level=level, **fields)
        lines(event, level=level, **fields)
    assert many.getvalue() == ""  # nothing before it is written
    _write(lines)
    assert _strip_ts(many.getvalue(), as_json) == _strip_ts(one.getvalue(), as_json)
    assert len(many.getvalue().splitlines()) == 4  # the debug line is below the threshold
    if not as_json:
        text = many.getvalue()
        assert "\x1b" not in text and "\r" not in text and "\u202e" not in text and "\x9b" not in text
        assert "\n2026-12-04T00:00:00.000+00:00 INFO enqueued worker=forged" not in text
        assert "w\\x0a2026-12-04T00:00:00.000+00:00" in text  # the value's newline, escaped
    _write(lines)  # written once: nothing collected since
    assert len(many.getvalue().splitlines()) == 4


def test_lines_carry_the_instant_each_was_logged(monkeypatch):
    out = io.StringIO()
    lines = Lines(EventLog(stream=out))
    instants = iter([1764885600.123, 1764885601.9876])
    monkeypatch.setattr("scrinalia_workers.logs.time.time", lambda: next(instants))
    lines("enqueued", worker="a")
    lines("enqueued", worker="b")
    _write(lines)
    assert [x.split(" ")[0] for x in out.getvalue().splitlines()] == [
        "2025-12-04T22:00:00.123+00:00",
        "2025-12-04T22:00:01.987+00:00",
    ]


@pytest.fixture
def holder(db_dsn, monkeypatch):
    """A Scheduler holding the lock in this process, its events captured as JSON lines."""
    with lock_holding_scheduler(db_dsn, "lines") as s:
        s.settings = replace(s.settings, thread_lines=1)  # every chunk's lines through the thread
        yield s


_due = due_yearly


def _enqueued(holder) -> list[str]:
    return sorted(e["worker"] for e in holder.events() if e["event"] == "enqueued")


def test_every_decision_is_written_before_the_pass_returns(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, tick_chunk=4)
    names = make_workers(db, 11)
    _due(db, names)
    real = tick.decision_text

    def slow(*args):
        # a logger slower than the database (a slow pipe): the pass must still wait for it
        time.sleep(0.1)
        return real(*args)

    monkeypatch.setattr(tick, "decision_text", slow)
    assert holder.tick()
    assert _enqueued(holder) == sorted(names)  # three chunks, each line once
    run_ids = {e["run_id"] for e in holder.events() if e["event"] == "enqueued"}
    assert run_ids == {
        r[0] for r in db.execute("SELECT run_id FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'")
    }


def test_a_lost_lock_still_writes_the_committed_chunks_lines(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, tick_chunk=5)
    names = make_workers(db, 12)
    _due(db, names)
    checks = []

    def lose():
        checks.append(1)
        if len(checks) == 2:
            raise LockLost("lost between chunks")

    monkeypatch.setattr(holder, "_check_lock", lose)
    with pytest.raises(LockLost):
        holder.tick()
    committed = [r[0] for r in db.execute("SELECT worker_name FROM scrinalia.archive_worker_runs ORDER BY 1")]
    assert len(committed) == 10  # two chunks committed, the third never began
    assert _enqueued(holder) == committed  # and both chunks' lines were written


def test_an_error_while_logging_is_raised_by_the_pass_after_the_others_lines(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, tick_chunk=3)
    _due(db, make_workers(db, 7))
    real = tick.decision_text
    calls = []

    def broken_once(*args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("cannot log")
        return real(*args)

    monkeypatch.setattr(tick, "decision_text", broken_once)
    with pytest.raises(RuntimeError, match="cannot log"):
        holder.tick()
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 7
    # the first chunk's lines stopped at the error; the next chunks' were all written
    assert len(_enqueued(holder)) == 4


def test_a_chunks_lines_are_formatted_while_the_next_chunks_tick_runs_not_while_its_instants_are_computed(
    db, holder, monkeypatch
):
    # Both in Python, the lines of one chunk and the instants of the next would share
    # the interpreter; while the database runs the next tick, the pass only waits.
    holder.settings = replace(holder.settings, tick_chunk=4)
    names = make_workers(db, 11)  # three chunks: 4, 4, 3
    _due(db, names)
    order: list[str] = []
    real_after_each = Occurrences.after_each
    real_text = tick.decision_text

    def computing(self, pairs, t):
        order.append("instants, begun")
        time.sleep(0.2)  # (long enough for a thread handed the lines at once to begin them)
        try:
            return real_after_each(self, pairs, t)
        finally:
            order.append("instants, done")

    def formatting(*args):
        order.append("lines")
        return real_text(*args)

    monkeypatch.setattr(Occurrences, "after_each", computing)
    monkeypatch.setattr(tick, "decision_text", formatting)
    assert holder.tick()
    assert _enqueued(holder) == sorted(names)
    # each chunk's lines after the next chunk's instants (the last: after the chunks)
    begun = [i for i, x in enumerate(order) if x == "lines"]
    done = [i for i, x in enumerate(order) if x == "instants, done"]
    assert len(begun) == len(done) == 3, order
    assert begun[0] > done[1] and begun[1] > done[2], order


def test_a_small_chunk_is_logged_before_the_pass_goes_on(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, thread_lines=3)
    holder.settings = replace(holder.settings, tick_chunk=3)
    _due(db, make_workers(db, 5))  # a chunk of 3 through the thread, then one of 2 at once
    threads = []
    real = tick.decision_text

    def where(*args):
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(tick, "decision_text", where)
    assert holder.tick()
    assert threads == [False, True]
    assert len(_enqueued(holder)) == 5


@pytest.mark.parametrize("value", ["ascii\x1b[31mred\rback\x7f", "caf\u00e9\x1b]0;title\x07"])
def test_an_acting_character_is_escaped_in_an_ascii_text_and_in_any_other(value):
    out = io.StringIO()
    lines = Lines(EventLog(stream=out))
    lines("skipped", worker=value, reason="plain")
    _write(lines)
    text = out.getvalue()
    assert text.count("\n") == 1 and not re.search("[\x00-\x09\x0b-\x1f\x7f]", text)
    assert "\\x1b" in text


def test_a_next_occurrence_reads_at_its_own_offset():

    at = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)
    out = io.StringIO()
    lines = Lines(EventLog(json_lines=True, stream=out))
    for t in (at, at.astimezone(timezone(timedelta(hours=1)))):  # equal instants
        decision_lines.log_decision(
            lines,
            {"worker_name": "w", "decision": "ARMED", "next_run_at": t, "scheduled_for": None},
            ("* * * * *", "UTC"),
        )
    _write(lines)
    assert [json.loads(x)["next_run_at"] for x in out.getvalue().splitlines()] == [
        "2026-12-04T22:00:00+00:00",
        "2026-12-04T23:00:00+01:00",
    ]


def test_a_refusal_of_a_schedule_stored_beyond_every_date_is_logged_with_the_others(db, holder, monkeypatch):
    """The decisions are read with psycopg's own instant loaders, which fail on an
    instant datetime cannot hold: the one a refused schedule keeps (here 'infinity',
    written by hand) is not read, and the chunk's other decisions are logged too."""
    names = make_workers(db, 3)
    _due(db, names[:2])
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " VALUES (%s, '0 4 * * *', 'UTC', 'infinity')",
        (names[2],),
    )
    real = tick.Occurrences.after_each

    def off_by_a_minute(self, pairs, t):
        # this shim and the server disagree on that cron: the tick refuses its instant
        got = real(self, pairs, t)
        return [n + timedelta(minutes=1) if p[0] == "0 4 * * *" else n for p, n in zip(pairs, got)]

    monkeypatch.setattr(tick.Occurrences, "after_each", off_by_a_minute)
    assert holder.tick()
    assert _enqueued(holder) == sorted(names[:2])
    (refused,) = [e for e in holder.events() if e["event"] == "tick refused"]
    assert refused["worker"] == names[2] and "does not fire then" in refused["reason"]
    stored = db.execute(
        "SELECT next_run_at::text, arm_error IS NOT NULL FROM scrinalia.archive_worker_schedules WHERE worker_name = %s",
        (names[2],),
    ).fetchone()
    assert stored == ("infinity", True)


def test_the_work_session_reads_its_instants_in_utc_whatever_the_servers_zone(db, db_dsn):
    # a session that starts in another zone (the server's, a role's or the DSN's)
    with lock_holding_scheduler(db_dsn + " options='-c TimeZone=Europe/Paris'", "utc") as s:
        assert s.work_conn.execute("SHOW TimeZone").fetchone()[0] == "UTC"
        assert s.work_conn.info.timezone is UTC  # psycopg's own, no zone conversion a value
        names = make_workers(db, 2)
        _due(db, names)
        assert s.tick()
        lines = [e for e in s.events() if e["event"] == "enqueued"]
        assert len(lines) == 2
        assert all(e["next_run_at"].endswith("+00:00") and e["scheduled_for"].endswith("+00:00") for e in lines)
