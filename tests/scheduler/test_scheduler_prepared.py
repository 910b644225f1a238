"""The prepared tick: while it waits for the next due instant the
scheduler reads the schedules due then and computes their next occurrences, and at the
instant ticks them with one call, tick_due_at(), which touches only schedules whose
next_run_at is still exactly that instant."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import replace

import psycopg
import pytest

from helpers import YEARLY, make_workers, put_schedule, raises_sqlstate
from scrinalia_workers import cron
from scrinalia_workers.logs import EventLog
from scrinalia_workers.scheduler import Scheduler, prepared
from scrinalia_workers.scheduler.settings import DEFAULTS
from scrinalia_workers.testkit.waiting import wait_for


@pytest.fixture
def holder(db_dsn):
    out = io.StringIO()
    s = Scheduler(db_dsn, name="prepared", log=EventLog(json_lines=True, stream=out, level="debug"))
    assert s._acquire()
    s.events = lambda: [json.loads(x) for x in out.getvalue().splitlines()]
    yield s
    s._close()


# The prepared tick leaves a schedule whose next occurrence may already have passed to
# the ordinary pass; a minutely cron does that whenever the instant lands on second 59,
# so the tests' schedules are YEARLY unless they say otherwise.
def _schedule(db, names, next_run_at_sql, cron_text=YEARLY):
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        f" SELECT w, %s, 'UTC', {next_run_at_sql} FROM unnest(%s::text[]) w",
        (cron_text, names),
    )


def _until_due(holder):
    """Until it is time, on the holder's clock, to send its prepared tick."""
    p = holder._prepared
    wait_for(lambda: p.is_due(holder.clock.monotonic()), 5, 0.005, what="the prepared tick's time")


def _next_run(db, worker):
    return db.execute(
        "SELECT next_run_at FROM scrinalia.archive_worker_schedules WHERE worker_name = %s", (worker,)
    ).fetchone()[0]


def test_tick_due_at_ticks_only_the_schedules_still_due_at_that_instant(db):
    a, b, c = make_workers(db, 3)
    t = db.execute("SELECT date_trunc('minute', now()) - interval '1 minute'").fetchone()[0]
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) VALUES"
        " (%s, '* * * * *', 'UTC', %s), (%s, '* * * * *', 'UTC', %s - interval '1 minute'),"
        " (%s, '* * * * *', 'UTC', NULL)",
        (a, t, b, t, c),
    )
    nxt = db.execute("SELECT date_trunc('minute', now()) + interval '1 hour'").fetchone()[0]  # an occurrence
    rows = db.execute(
        "SELECT worker_name, decision, scheduled_for FROM scrinalia.tick_due_at(%s, %s, %s, 'test')",
        (t, [a, b, c], [nxt] * 3),
    ).fetchall()
    assert rows == [(a, "ENQUEUED", t)]
    # b (another instant) and c (unarmed: its cron may be new) are left to the ordinary tick
    assert _next_run(db, b) < t and _next_run(db, c) is None


def test_tick_due_at_works_ahead_and_returns_only_at_the_instant(db, db_dsn):
    (a,) = make_workers(db, 1)
    t = db.execute("SELECT now() + interval '0.5 seconds'").fetchone()[0]
    _schedule(db, [a], f"'{t.isoformat()}'::timestamptz")
    with psycopg.connect(db_dsn) as c:  # a transaction, as the scheduler's
        rows = c.execute(
            "SELECT worker_name, decision, scheduled_for FROM scrinalia.tick_due_at(%s, %s, %s)",
            (t, [a], [cron.next_occurrence(YEARLY, "UTC", t)]),
        ).fetchall()
        returned_at = c.execute("SELECT clock_timestamp()").fetchone()[0]
        assert rows == [(a, "ENQUEUED", t)]
        assert returned_at >= t  # the commit can only come after the instant
        # not visible before the commit
        assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 0
        c.commit()
    assert db.execute("SELECT scheduled_for, created_at FROM scrinalia.archive_worker_runs").fetchall() == [(t, t)]


def test_ahead_of_the_instant_a_busy_slot_is_left_to_the_tick_at_the_instant(db):
    # the slot may be free by the instant: ahead, only the free ones are enqueued
    free, busy = make_workers(db, 2)
    db.execute("SELECT scrinalia.enqueue(%s)", (busy,))
    t = db.execute("SELECT now() + interval '0.3 seconds'").fetchone()[0]
    _schedule(db, [free, busy], f"'{t.isoformat()}'::timestamptz")
    rows = db.execute(
        "SELECT worker_name, decision FROM scrinalia.tick_due_at(%s, %s, %s)",
        (t, [free, busy], [cron.next_occurrence(YEARLY, "UTC", t)] * 2),
    ).fetchall()
    assert rows == [(free, "ENQUEUED")]
    assert _next_run(db, busy) == t  # undecided, for the tick at the instant


def test_tick_due_at_refuses_an_instant_too_far_ahead(db):
    (a,) = make_workers(db, 1)
    t = db.execute("SELECT now() + interval '5 seconds'").fetchone()[0]
    _schedule(db, [a], f"'{t.isoformat()}'::timestamptz")
    with raises_sqlstate("SW030", "at most 00:00:01 ahead"):
        db.execute(
            "SELECT * FROM scrinalia.tick_due_at(%s, %s, %s)", (t, [a], [cron.next_occurrence(YEARLY, "UTC", t)])
        )
    assert _next_run(db, a) == t


def test_tick_due_at_refuses_a_null_instant(db):
    with raises_sqlstate("SW030", "finite instant"):
        db.execute("SELECT * FROM scrinalia.tick_due_at(NULL, ARRAY['x'], ARRAY[now() + interval '1 day'])")


def test_schedules_due_at_lists_the_enabled_ones_of_that_instant(db):
    a, b, c, d = make_workers(db, 4)
    t = db.execute("SELECT date_trunc('minute', now()) + interval '2 minutes'").fetchone()[0]
    for w in (a, b, c):
        _schedule(db, [w], f"'{t.isoformat()}'::timestamptz")
    _schedule(db, [d], f"'{t.isoformat()}'::timestamptz + interval '1 minute'")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET enabled = false WHERE worker_name = %s", (b,))
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET arm_error = 'x', arm_error_since = now(),"
        " arm_retry_at = now() WHERE worker_name = %s",
        (c,),
    )
    assert db.execute("SELECT worker_name FROM scrinalia.schedules_due_at(%s)", (t,)).fetchall() == [(a,)]


def test_the_prepared_tick_enqueues_at_the_instant_once(db, holder):
    names = make_workers(db, 20)
    _schedule(db, names, "date_trunc('second', now()) + interval '2 seconds'")
    t = _next_run(db, names[0])
    holder._check_lock()
    holder.tick()  # nothing due yet
    holder._sleep_for(False)  # prepares the instant's tick
    assert holder._prepared is not None and holder._prepared.due_at == t and len(holder._prepared.workers) == 20
    _until_due(holder)
    assert db.execute("SELECT now() < %s", (t,)).fetchone()[0]  # sent ahead of the instant
    holder._tick_prepared()
    assert db.execute("SELECT now() >= %s", (t,)).fetchone()[0]  # committed at it
    runs = db.execute(
        "SELECT count(*), count(DISTINCT worker_name), min(scheduled_for), count(DISTINCT xmin::text)"
        " FROM scrinalia.archive_worker_runs"
    ).fetchone()
    assert runs == (20, 20, t, 1)  # every schedule once, in one transaction
    events = holder.events()
    assert [e for e in events if e["event"] == "prepared tick"][0]["decided"] == 20
    # the next occurrence is the cron's, after the instant
    assert _next_run(db, names[0]) == cron.next_occurrence(YEARLY, "UTC", t)
    assert not holder.tick()  # the ordinary pass finds nothing left


def test_a_cron_changed_after_preparing_is_armed_from_the_new_cron(db, holder):
    (a, b) = make_workers(db, 2)
    _schedule(db, [a, b], "date_trunc('second', now()) + interval '2 seconds'")
    t = _next_run(db, a)
    holder._sleep_for(False)
    assert holder._prepared.workers == [a, b]
    put_schedule(db, a, "0 3 * * *", "UTC")  # clears a's next_run_at
    wait_for(lambda: db.execute("SELECT now() >= %s", (t,)).fetchone()[0], 5, 0.01, what="the instant")
    p = holder._prepared
    wait_for(lambda: holder.clock.monotonic() >= p.ready, 5, 0.005, what="the prepared instant")
    holder._tick_prepared()
    assert db.execute("SELECT worker_name FROM scrinalia.archive_worker_runs").fetchall() == [(b,)]
    assert _next_run(db, a) is None  # not armed with the old cron's next minute
    holder.tick()
    assert _next_run(db, a) == cron.next_occurrence("0 3 * * *", "UTC", db.execute("SELECT now()").fetchone()[0])


def test_an_early_wake_keeps_the_prepared_tick_for_its_instant(db, holder):
    (a,) = make_workers(db, 1)
    _schedule(db, [a], "now() + interval '30 seconds'")
    holder._sleep_for(False)
    prepared = holder._prepared
    holder._tick_prepared()  # a NOTIFY woke us: too early
    assert holder._prepared is prepared
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 0


def test_the_real_loop_uses_the_prepared_tick(db, db_dsn):
    names = make_workers(db, 5)
    out = io.StringIO()
    s = Scheduler(db_dsn, name="loop", log=EventLog(json_lines=True, stream=out, level="debug"))
    t = threading.Thread(target=s.run)
    t.start()
    try:
        wait_for(lambda: '"lock acquired"' in out.getvalue(), 10, what="the lock")
        _schedule(db, names, "date_trunc('second', now()) + interval '2 seconds'")
        db.execute("NOTIFY scrinalia_scheduler")
        wait_for(
            lambda: db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 5,
            10,
            what="the runs",
        )
    finally:
        s.stop.set()
        t.join(10)
    events = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [e["decided"] for e in events if e["event"] == "prepared tick"] == [5]
    assert db.execute("SELECT count(DISTINCT worker_name) FROM scrinalia.archive_worker_runs").fetchone()[0] == 5


def test_a_spike_beyond_the_prepared_limit_has_the_rest_ticked_after(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, prepared_limit=3)
    names = make_workers(db, 7)
    _schedule(db, names, "date_trunc('second', now()) + interval '2 seconds'")
    t = _next_run(db, names[0])
    holder._sleep_for(False)
    assert holder._prepared.workers == sorted(names)[:3]
    _until_due(holder)
    holder._tick_prepared()
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 3
    holder.tick()  # the ordinary pass, right after the instant
    runs = db.execute(
        "SELECT count(*), count(DISTINCT worker_name), min(scheduled_for), max(scheduled_for)"
        " FROM scrinalia.archive_worker_runs"
    ).fetchone()
    assert runs == (7, 7, t, t)


def test_a_spike_larger_than_a_chunk_is_prepared_whole_and_visible_at_its_instant(db, holder, monkeypatch):
    """Not only its first chunk: every run of the spike is committed at the instant, in
    one transaction, and the lead grew with its size."""
    holder.settings = replace(holder.settings, tick_chunk=3)
    names = make_workers(db, 7)
    _schedule(db, names, "date_trunc('second', now()) + interval '2 seconds'")
    t = _next_run(db, names[0])
    holder._sleep_for(False)
    assert holder._prepared.workers == sorted(names)
    assert holder._prepared.ahead == prepared.ahead_of(7) > prepared.ahead_of(1)
    _until_due(holder)
    holder._tick_prepared()
    assert db.execute("SELECT now() >= %s", (t,)).fetchone()[0]  # committed at the instant
    runs = db.execute(
        "SELECT count(*), count(DISTINCT worker_name), min(scheduled_for), count(DISTINCT xmin::text)"
        " FROM scrinalia.archive_worker_runs"
    ).fetchone()
    assert runs == (7, 7, t, 1)
    assert not holder.tick()  # nothing left for the ordinary pass


def test_the_longest_lead_stays_inside_max_tick_ahead(db):
    """The scheduler's lead for its largest prepared tick must be one the server accepts
    (scrinalia.max_tick_ahead(), the one home of that bound), with room for the trip."""
    bound = db.execute("SELECT extract(epoch FROM scrinalia.max_tick_ahead())::float8").fetchone()[0]
    longest = prepared.ahead_of(DEFAULTS.prepared_limit)
    assert longest == prepared.ahead_of(10 * DEFAULTS.prepared_limit)  # capped
    assert longest <= 0.75 * bound
