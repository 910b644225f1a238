"""The scheduler ticks in chunks: each chunk its own transaction, committed
before the next, so the first runs of a spike are visible while the rest is decided."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from helpers import due_yearly, lock_holding_scheduler, make_workers
from scrinalia_workers import cron
from scrinalia_workers.errors import LockLost
from scrinalia_workers.scheduler.occurrences import Occurrences


@pytest.fixture
def holder(db_dsn):
    """A Scheduler holding the lock in this process, its events captured as JSON lines."""
    with lock_holding_scheduler(db_dsn, "chunks") as s:
        yield s


_due = due_yearly


def test_a_spike_is_ticked_in_committed_chunks_each_once(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, tick_chunk=7)
    names = make_workers(db, 30)
    _due(db, names)
    assert holder.tick()
    runs = db.execute(
        "SELECT count(*), count(DISTINCT worker_name), count(DISTINCT xmin::text)"
        " FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'"
    ).fetchone()
    assert runs == (30, 30, 5)  # 7 + 7 + 7 + 7 + 2: five transactions, every schedule once
    assert [e["event"] for e in holder.events()].count("enqueued") == 30
    assert (
        db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at <= now()").fetchone()[0]
        == 0
    )
    assert db.execute("SELECT ticks FROM scrinalia.scheduler_state").fetchone()[0] == 5
    assert not holder.tick()  # nothing due any more: no empty pass counted as progress


def test_the_lock_is_checked_between_chunks(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, tick_chunk=5)
    names = make_workers(db, 12)
    _due(db, names)
    checks = []
    real = holder._check_lock

    def check_then_lose():
        checks.append(1)
        real()
        raise LockLost("lost between chunks")

    monkeypatch.setattr(holder, "_check_lock", check_then_lose)
    with pytest.raises(LockLost):
        holder.tick()
    assert checks == [1]
    # the first chunk committed; nothing after the lost lock
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 5


def test_next_occurrences_are_shared_across_chunks_only_while_valid(monkeypatch):
    occ = Occurrences()
    computed = []
    real = cron.try_next_occurrences
    monkeypatch.setattr(
        cron,
        "try_next_occurrences",
        lambda pairs, after: computed.append(sorted(pairs)) or real(pairs, after),
    )
    t0 = datetime(2026, 3, 1, 10, 0, 30, tzinfo=UTC)
    pairs = [("* * * * *", "UTC"), ("0 * * * *", "Europe/Berlin"), ("* * * * *", "UTC")]
    first = occ.after_each(pairs, t0)
    assert first == [
        datetime(2026, 3, 1, 10, 1, tzinfo=UTC),
        datetime(2026, 3, 1, 11, 0, tzinfo=UTC),
        datetime(2026, 3, 1, 10, 1, tzinfo=UTC),
    ]
    # a later chunk past the minute: the minute cron moves on, the hourly one is reused
    later = occ.after_each(pairs, t0 + timedelta(seconds=45))
    assert later[0] == datetime(2026, 3, 1, 10, 2, tzinfo=UTC) and later[1] == first[1]
    assert computed[1] == [("* * * * *", "UTC")]
    # a clock that went back never reuses a value computed after a later instant
    back = occ.after_each(pairs, t0 - timedelta(minutes=5))
    assert back[0] == datetime(2026, 3, 1, 9, 56, tzinfo=UTC)
    assert back[1] == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    bad = occ.after_each([("* * * * *", "Mars/Olympus")], t0)
    assert isinstance(bad[0], Exception)
    assert isinstance(occ.after_each([("* * * * *", "Mars/Olympus")], t0)[0], Exception)  # not kept


def test_a_spike_of_whole_chunks_takes_no_last_empty_one(db, holder, monkeypatch):
    holder.settings = replace(holder.settings, tick_chunk=5)
    _due(db, make_workers(db, 10))
    checks = []
    real = holder._check_lock
    monkeypatch.setattr(holder, "_check_lock", lambda: checks.append(1) or real())
    assert holder.tick()
    # the first chunk saw a sixth due schedule, the second saw none after its five
    assert checks == [1]
    assert db.execute("SELECT ticks FROM scrinalia.scheduler_state").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 10


def test_a_backlog_pass_logs_the_catch_up_the_tick_decided(db, holder, monkeypatch):
    """Each enqueued run's log line says whether periods were missed, as the tick decided
    and stored it on the run: the pass computes each pair's next occurrence once, and no
    cron for the catch-up."""
    names = make_workers(db, 40)
    # hourly; the first 30 waited for the period three hours back (periods missed), the
    # other 10 for the current hour's (just due: nothing missed)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, '0 * * * *', 'UTC', date_trunc('hour', now()) - CASE WHEN i <= 30"
        " THEN interval '3 hours' ELSE interval '0' END"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS u(w, i)",
        (names,),
    )
    evaluated = []
    real_each, real_one = cron.try_next_occurrences, cron.next_occurrence
    monkeypatch.setattr(
        cron, "try_next_occurrences", lambda pairs, after: evaluated.extend(pairs) or real_each(pairs, after)
    )
    monkeypatch.setattr(cron, "next_occurrence", lambda *a: evaluated.append(a[:2]) or real_one(*a))
    assert holder.tick()
    enqueued = {e["worker"]: e["catch_up"] for e in holder.events() if e["event"] == "enqueued"}
    assert enqueued == {w: i < 30 for i, w in enumerate(names)}
    assert sum(e["event"] == "catch-up" for e in holder.events()) == 30
    stored = dict(db.execute("SELECT worker_name, catch_up FROM scrinalia.worker_run_history").fetchall())
    assert stored == enqueued
    assert evaluated == [("0 * * * *", "UTC")]  # the next occurrence, once; the catch-up is SQL's
