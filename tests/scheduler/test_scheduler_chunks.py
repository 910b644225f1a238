"""The scheduler ticks in chunks: each chunk its own transaction, committed
before the next, so the first runs of a spike are visible while the rest is decided."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from helpers import due_yearly, lock_holding_scheduler, make_workers
from scrinalia_workers import cron
from scrinalia_workers.errors import LockLost
from scrinalia_workers.scheduler import tick
from scrinalia_workers.scheduler.occurrences import Occurrences


@pytest.fixture
def holder(db_dsn):
    """A Scheduler holding the lock in this process, its events captured as JSON lines."""
    with lock_holding_scheduler(db_dsn, "chunks") as s:
        yield s


_due = due_yearly


def test_a_spike_is_ticked_in_committed_chunks_each_once(db, holder, monkeypatch):
    monkeypatch.setattr(tick, "TICK_CHUNK", 7)
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
    monkeypatch.setattr(tick, "TICK_CHUNK", 5)
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


def test_a_pair_whose_periods_missed_none_costs_one_evaluation_for_the_tick_and_its_log(monkeypatch):
    """The due schedules' waited-for instants go with their pairs: a pair whose first
    occurrence after the earliest of them is still ahead gets its next occurrence and
    its runs' catch-up answer from one cron evaluation; a pair that missed a period
    pays the second, and every answer is the cron's own."""
    evaluated = []
    real_each, real_one = cron.try_next_occurrences, cron.next_occurrence
    monkeypatch.setattr(
        cron, "try_next_occurrences", lambda pairs, after: evaluated.extend(pairs) or real_each(pairs, after)
    )
    monkeypatch.setattr(cron, "next_occurrence", lambda *a: evaluated.append(a[:2]) or real_one(*a))
    t = datetime(2026, 3, 1, 10, 30, 5, tzinfo=UTC)
    hourly, quarter, fresh = ("0 * * * *", "UTC"), ("*/15 * * * *", "Europe/Berlin"), ("5 * * * *", "UTC")
    waited = {
        hourly: [datetime(2026, 3, 1, 10, 0, tzinfo=UTC)] * 3,  # nothing between 10:00 and now
        quarter: [datetime(2026, 3, 1, 9, 45, tzinfo=UTC), datetime(2026, 3, 1, 9, 50, tzinfo=UTC)],  # 10:00 missed
        fresh: [datetime(2026, 3, 1, 10, 29, 50, tzinfo=UTC)],  # under a minute: cannot hide a period
    }
    pairs = [p for p, ss in waited.items() for _ in ss]
    since = [s for ss in waited.values() for s in ss]
    occ = Occurrences()
    assert occ.after_each(pairs, t, since=since) == [real_one(*p, t) for p in pairs]
    missed = [occ.missed(p, s, t) for p, s in zip(pairs, since)]
    assert missed == [real_one(*p, s) <= t and t - s >= timedelta(minutes=1) for p, s in zip(pairs, since)]
    assert missed == [False, False, False, True, True, False]
    assert sorted(evaluated) == sorted([hourly, quarter, quarter, fresh])
    # an unknown zone is still its pair's error, and not kept
    bad = ("0 * * * *", "Mars/Olympus")
    assert isinstance(occ.after_each([bad], t, since=[t - timedelta(hours=1)])[0], Exception)


def test_instants_of_the_servers_zone_are_compared_as_instants_in_a_fold():
    """The due rows' instants come in the session's zone, the server's. Two datetimes of
    one zone compare and subtract by their wall clocks, so in a fall-back fold 02:40
    CEST (00:40 UTC) reads as later than 02:10 CET (01:10 UTC). The windows and the
    catch-up check answer by instants, whatever the order of the questions."""
    berlin = ZoneInfo("Europe/Berlin")  # 2026-10-25 03:00 CEST -> 02:00 CET
    db_now = datetime(2026, 10, 25, 2, 10, tzinfo=berlin, fold=1)
    sched_for = datetime(2026, 10, 25, 2, 40, tzinfo=berlin)
    assert db_now.astimezone(UTC) - sched_for.astimezone(UTC) == timedelta(minutes=30)
    hourly = ("0 * * * *", "UTC")  # 01:00 UTC falls between: a period was missed
    occ = Occurrences()
    assert occ.after_each([hourly], db_now, since=[sched_for]) == [datetime(2026, 10, 25, 2, 0, tzinfo=UTC)]
    assert occ.missed(hourly, sched_for, db_now) is True
    rng = random.Random(7)
    pairs = [("*/20 * * * *", "Europe/Berlin"), ("15 * * * *", "UTC"), ("30 2 * * *", "Europe/Berlin")]
    start = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)
    memo = Occurrences()
    for _ in range(300):
        pair = rng.choice(pairs)
        now = (start + timedelta(seconds=rng.randrange(0, 4 * 3600))).astimezone(berlin)
        waited = (now - timedelta(seconds=rng.randrange(0, 3 * 3600))).astimezone(berlin)
        truth_next = cron.next_occurrence(*pair, now)
        truth_missed = now.astimezone(UTC) - waited.astimezone(UTC) >= timedelta(minutes=1) and (
            cron.next_occurrence(*pair, waited) <= now
        )
        if rng.random() < 0.5:
            assert memo.after_each([pair], now, since=[waited]) == [truth_next], (pair, now, waited)
        assert memo.missed(pair, waited, now) is truth_missed, (pair, waited, now)


def test_a_spike_of_whole_chunks_takes_no_last_empty_one(db, holder, monkeypatch):
    monkeypatch.setattr(tick, "TICK_CHUNK", 5)
    _due(db, make_workers(db, 10))
    checks = []
    real = holder._check_lock
    monkeypatch.setattr(holder, "_check_lock", lambda: checks.append(1) or real())
    assert holder.tick()
    # the first chunk saw a sixth due schedule, the second saw none after its five
    assert checks == [1]
    assert db.execute("SELECT ticks FROM scrinalia.scheduler_state").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 10


def test_a_backlog_pass_evaluates_the_catch_up_once_per_pair_and_window(db, holder, monkeypatch):
    """Each enqueued run's log line says whether periods were missed: the schedules of a
    (cron, zone) that waited for the same window share one cron evaluation, not one per run."""
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
    calls = []
    real = cron.next_occurrence
    monkeypatch.setattr(cron, "next_occurrence", lambda *a: calls.append(a) or real(*a))
    assert holder.tick()
    enqueued = {e["worker"]: e["catch_up"] for e in holder.events() if e["event"] == "enqueued"}
    assert enqueued == {w: i < 30 for i, w in enumerate(names)}
    assert sum(e["event"] == "catch-up" for e in holder.events()) == 30
    assert len(calls) <= 2, calls  # one per window (none when the period is under a minute old)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/Sao_Paulo", "Australia/Lord_Howe"])
def test_the_catch_up_windows_answer_as_the_cron_itself(zone):
    """The memo answers exactly `next_occurrence(scheduled_for) <= now`, across DST
    transitions, whatever order the instants come in."""
    rng = random.Random(zone)
    db_now = datetime(2026, 10, 25, 4, 30, tzinfo=UTC)  # after Berlin's fall-back
    pairs = [("*/20 * * * *", zone), ("30 2 * * *", zone), ("15 * * * *", zone), ("0 0 1 * *", zone)]
    memo = Occurrences()
    for _ in range(400):
        pair = rng.choice(pairs)
        sched_for = db_now - timedelta(seconds=rng.randrange(0, 3 * 86400))
        expected = db_now - sched_for >= timedelta(minutes=1) and cron.next_occurrence(*pair, sched_for) <= db_now
        assert memo.missed(pair, sched_for, db_now) is expected, (pair, sched_for)
