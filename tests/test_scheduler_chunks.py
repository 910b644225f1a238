"""The scheduler ticks in chunks (issue 12): each chunk its own transaction, committed
before the next, so the first runs of a spike are visible while the rest is decided."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone

import pytest

from helpers import make_workers
from scrinalia_workers import scheduler
from scrinalia_workers.logs import EventLog


@pytest.fixture
def holder(db_dsn):
    """A Scheduler holding the lock in this process, its events captured as JSON lines."""
    out = io.StringIO()
    s = scheduler.Scheduler(db_dsn, name="chunks", log=EventLog(json_lines=True, stream=out))
    assert s._acquire()
    s.events = lambda: [json.loads(x) for x in out.getvalue().splitlines()]
    yield s
    s._close()


def _due(db, names, cron="* * * * *"):
    db.execute("INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
               " SELECT w, %s, 'UTC', now() - interval '30 seconds' FROM unnest(%s::text[]) w", (cron, names))


def test_a_spike_is_ticked_in_committed_chunks_each_once(db, holder, monkeypatch):
    monkeypatch.setattr(scheduler, "TICK_CHUNK", 7)
    names = make_workers(db, 30)
    _due(db, names)
    assert holder.tick()
    runs = db.execute("SELECT count(*), count(DISTINCT worker_name), count(DISTINCT xmin::text)"
                      " FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'").fetchone()
    assert runs == (30, 30, 5)  # 7 + 7 + 7 + 7 + 2: five transactions, every schedule once
    assert [e["event"] for e in holder.events()].count("enqueued") == 30
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules"
                      " WHERE next_run_at <= now()").fetchone()[0] == 0
    assert db.execute("SELECT ticks FROM scrinalia.scheduler_state").fetchone()[0] == 5
    assert not holder.tick()  # nothing due any more: no empty pass counted as progress


def test_the_lock_is_checked_between_chunks(db, holder, monkeypatch):
    monkeypatch.setattr(scheduler, "TICK_CHUNK", 5)
    names = make_workers(db, 12)
    _due(db, names)
    checks = []
    real = holder._check_lock

    def check_then_lose():
        checks.append(1)
        real()
        raise scheduler.LockLost("lost between chunks")

    monkeypatch.setattr(holder, "_check_lock", check_then_lose)
    with pytest.raises(scheduler.LockLost):
        holder.tick()
    assert checks == [1]
    # the first chunk committed; nothing after the lost lock
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 5


def test_next_occurrences_are_shared_across_chunks_only_while_valid():
    memo = {}
    t0 = datetime(2026, 3, 1, 10, 0, 30, tzinfo=timezone.utc)
    pairs = [("* * * * *", "UTC"), ("0 * * * *", "Europe/Berlin"), ("* * * * *", "UTC")]
    first = scheduler._next_occurrences(pairs, t0, memo)
    assert first == [datetime(2026, 3, 1, 10, 1, tzinfo=timezone.utc), datetime(2026, 3, 1, 11, 0, tzinfo=timezone.utc),
                     datetime(2026, 3, 1, 10, 1, tzinfo=timezone.utc)]
    # a later chunk past the minute: the minute cron moves on, the hourly one is reused
    later = scheduler._next_occurrences(pairs, t0 + timedelta(seconds=45), memo)
    assert later[0] == datetime(2026, 3, 1, 10, 2, tzinfo=timezone.utc) and later[1] == first[1]
    # a clock that went back never reuses a value computed after a later instant
    back = scheduler._next_occurrences(pairs, t0 - timedelta(minutes=5), memo)
    assert back[0] == datetime(2026, 3, 1, 9, 56, tzinfo=timezone.utc)
    assert back[1] == datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
    bad = scheduler._next_occurrences([("* * * * *", "Mars/Olympus")], t0, memo)
    assert isinstance(bad[0], Exception)
