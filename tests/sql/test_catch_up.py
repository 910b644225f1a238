"""The catch-up is the tick's decision: an enqueued run whose period hid others (an
occurrence of its cron fell between the instant waited for and the tick) is stored
with catch_up true and returned so; the shim logs that answer. cron_fires_between()
answers as the cron itself (scrinalia_workers.cron), across DST transitions."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from helpers import make_worker, put_schedule, set_next_run, tick
from scrinalia_workers import cron

MINUTE = timedelta(minutes=1)


def _catch_up(db, worker):
    return db.execute(
        "SELECT catch_up FROM scrinalia.worker_run_history WHERE worker_name = %s ORDER BY run_id DESC LIMIT 1",
        (worker,),
    ).fetchone()[0]


def test_the_tick_stores_and_returns_whether_periods_were_missed(db):
    cases = {
        "down-three-days": ("* * * * *", "3 days", True),
        "just-due": ("* * * * *", "30 seconds", False),  # under a minute: nothing hidden
        "yearly": ("0 0 1 1 *", "3 days", None),  # the cron decides (None: compute it)
        "daily-berlin": ("30 2 * * *", "26 hours", True),  # a day and more: a 02:30 passed
    }
    for w, (c, _, _) in cases.items():
        make_worker(db, w)
        put_schedule(db, w, c, tz="Europe/Berlin" if "berlin" in w else "UTC")
    tick(db)  # arm
    for w, (_, ago, _) in cases.items():
        set_next_run(db, w, ago)
    due, decisions = tick(db)
    was = {r[0]: r[3] for r in due}
    now = due[0][4]
    assert {d[0]: d[1] for d in decisions} == dict.fromkeys(cases, "ENQUEUED")
    answered = dict(
        db.execute(
            "SELECT worker_name, catch_up FROM scrinalia.worker_run_history WHERE trigger = 'SCHEDULE'"
        ).fetchall()
    )
    for w, (c, _, expected) in cases.items():
        if expected is None:
            expected = cron.next_occurrence(c, "UTC", was[w]) <= now
        assert answered[w] is expected, w
    # and what tick() returns is what it stored
    out = db.execute(
        "SELECT worker_name, catch_up FROM scrinalia.worker_run_history WHERE trigger = 'SCHEDULE'"
    ).fetchall()
    assert dict(out) == answered


def test_the_tick_returns_the_catch_up_column(db):
    make_worker(db, "ocr")
    put_schedule(db, "ocr", "* * * * *", tz="UTC")
    tick(db)
    set_next_run(db, "ocr", "2 hours")
    with db.transaction():
        due = db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()
        nxt = cron.next_occurrence("* * * * *", "UTC", due[0][4] + timedelta(hours=1))
        row = db.execute(
            "SELECT decision, catch_up FROM scrinalia.tick_v2(ARRAY['ocr'], ARRAY[%s::timestamptz], 'test')", (nxt,)
        ).fetchone()
    assert row == ("ENQUEUED", True) and _catch_up(db, "ocr") is True


def test_a_run_not_created_by_the_tick_records_no_catch_up(db):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue('ocr')")
    assert _catch_up(db, "ocr") is None


def assert_answers(db, zone: str, cases: list[tuple]) -> None:
    """cron_fires_between() answers each (cron, waited, now, expected) case as expected,
    and the cases hold both answers."""
    got = db.execute(
        "SELECT scrinalia.cron_fires_between(c, %s, a, u)"
        " FROM unnest(%s::text[], %s::timestamptz[], %s::timestamptz[]) WITH ORDINALITY AS x(c, a, u, i) ORDER BY i",
        (zone, [c[0] for c in cases], [c[1] for c in cases], [c[2] for c in cases]),
    ).fetchall()
    wrong = [c for c, (answer,) in zip(cases, got) if answer is not c[3]]
    assert wrong == []
    assert any(c[3] for c in cases) and not all(c[3] for c in cases)


@pytest.mark.parametrize(
    "zone", ["UTC", "Europe/Berlin", "America/New_York", "America/Sao_Paulo", "Australia/Lord_Howe"]
)
def test_cron_fires_between_answers_as_the_cron_itself(db, zone):
    """`next_occurrence(waited) <= now`, a minute or more apart, around the fall-back
    and spring-forward transitions (Lord Howe's are half an hour), whatever the instants."""
    rng = random.Random(zone)
    pairs = ["*/20 * * * *", "30 2 * * *", "15 * * * *", "0 0 1 * *", "0 3 * * 0", "5,35 1-3 * * *"]
    nows = [
        datetime(2026, 10, 25, 4, 30, tzinfo=UTC),  # after Europe's fall-back
        datetime(2026, 3, 29, 1, 0, 30, tzinfo=UTC),  # Europe's spring-forward gap end
        datetime(2026, 3, 8, 9, 10, tzinfo=UTC),  # after New York's spring-forward
        datetime(2026, 4, 4, 16, 0, tzinfo=UTC),  # after Lord Howe's fall-back
        datetime(2026, 10, 3, 16, 0, tzinfo=UTC),  # after Lord Howe's spring-forward
    ]
    cases = []
    for _ in range(150):
        c, now = rng.choice(pairs), rng.choice(nows)
        waited = now - timedelta(seconds=rng.choice([rng.randrange(0, 90), rng.randrange(0, 3 * 86400)]))
        expected = now - waited >= MINUTE and cron.next_occurrence(c, zone, waited) <= now
        cases.append((c, waited, now, expected))
    assert_answers(db, zone, cases)


@pytest.mark.parametrize(
    "zone", ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago"]
)
def test_cron_fires_between_answers_as_the_cron_itself_after_weeks_away(db, zone):
    """Waits of up to seven weeks, crons that fire on few days or hours (the days and
    hours the masks exclude are passed whole), across every transition of the year."""
    rng = random.Random("weeks " + zone)
    pairs = [
        "0 3 * * *",
        "30 2 * * 0",
        "0 0 1 * *",
        "45 23 28-31 * *",
        "0 12 13 * 5",
        "10 1-3 * * 1-5",
        "0 2 29 2 *",
        "*/30 9-17 * 3,10 *",
        "59 23 * * 6",
        "15 0 * * *",
    ]
    # the year's changes of offset: half the cases end within two days after one, having
    # waited a few days before it (a day passed whole there would overshoot the next one's
    # first hours: "15 0 * * 1" after a Sunday spring-forward)
    tz, start = ZoneInfo(zone), datetime(2026, 1, 1, tzinfo=UTC)
    changes = [
        start + timedelta(hours=h)
        for h in range(1, 366 * 24)
        if (start + timedelta(hours=h)).astimezone(tz).utcoffset()
        != (start + timedelta(hours=h - 1)).astimezone(tz).utcoffset()
    ]
    pairs += ["15 0 * * 1", "30 0 * * 1,4", "5 1 * * 1"]
    cases = []
    for n in range(160):
        c = rng.choice(pairs)
        if n % 2 and changes:
            now = rng.choice(changes) + timedelta(minutes=rng.randrange(0, 2 * 1440))
            waited = now - timedelta(seconds=rng.randrange(60, 4 * 86400))
        else:
            now = start + timedelta(minutes=rng.randrange(0, 366 * 1440))
            waited = now - timedelta(seconds=rng.randrange(60, 49 * 86400))
        expected = cron.next_occurrence(c, zone, waited) <= now
        cases.append((c, waited, now, expected))
    assert_answers(db, zone, cases)


def test_the_catch_up_is_a_column_of_the_run(db):
    """Written by the tick with the run, read by SQL from the run itself; 0010's table
    beside the ledger stays empty."""
    make_worker(db, "ocr")
    put_schedule(db, "ocr", "* * * * *", tz="UTC")
    tick(db)
    set_next_run(db, "ocr", "2 hours")
    tick(db)
    rows = db.execute(
        "SELECT catch_up FROM scrinalia.archive_worker_runs WHERE worker_name = 'ocr' ORDER BY run_id"
    ).fetchall()
    assert rows == [(True,)]
    assert _catch_up(db, "ocr") is True
    assert db.execute("SELECT count(*) FROM scrinalia.archive_run_catch_ups").fetchone()[0] == 0


def test_a_mark_in_the_old_table_moves_onto_its_run(db):
    """The tick of the code an upgrade replaces still writes 0010's table until the new
    code is installed: each mark it inserts is set on its run, and removed."""
    make_worker(db, "ocr")
    put_schedule(db, "ocr", "* * * * *", tz="UTC")
    tick(db)
    set_next_run(db, "ocr", "30 seconds")
    tick(db)
    (run_id, on_time) = db.execute(
        "SELECT run_id, catch_up FROM scrinalia.archive_worker_runs ORDER BY run_id DESC LIMIT 1"
    ).fetchone()
    assert on_time is False
    db.execute("INSERT INTO scrinalia.archive_run_catch_ups (run_id) VALUES (%s)", (run_id,))
    assert db.execute("SELECT catch_up FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)).fetchone() == (
        True,
    )
    assert db.execute("SELECT count(*) FROM scrinalia.archive_run_catch_ups").fetchone()[0] == 0


RUN_FUNCTIONS = (
    "enqueue",
    "enqueue_runs",
    "claim_runs",
    "claim_next",
    "finish",
    "rerun",
    "cancel_run",
    "reap_expired_leases",
)


def test_the_functions_return_the_ledgers_row_as_it_was_before_the_column(db):
    """What enqueue(), claim_next() and the others return is worker_run_v1: the ledger's
    columns but catch_up, in their order. A client that prepared its statement against
    them (an earlier release's runner) keeps its result type, and a column the ledger
    gains changes nothing of it."""
    ledger = [
        r[0]
        for r in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'scrinalia.archive_worker_runs'::regclass"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ).fetchall()
    ]
    frozen = [
        r[0]
        for r in db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'scrinalia.worker_run_v1'::regclass"
            " AND attnum > 0 ORDER BY attnum"
        ).fetchall()
    ]
    assert ledger == [*frozen, "catch_up"]
    returns = dict(
        db.execute(
            "SELECT p.proname, p.prorettype::regtype::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'scrinalia' AND p.proname = ANY (%s)",
            (list(RUN_FUNCTIONS),),
        ).fetchall()
    )
    assert returns == dict.fromkeys(RUN_FUNCTIONS, "scrinalia.worker_run_v1")
    make_worker(db, "ocr")
    with db.transaction(force_rollback=True):
        db.execute("ALTER TABLE scrinalia.archive_worker_runs ADD COLUMN a_later_column integer")
        cur = db.execute("SELECT * FROM scrinalia.enqueue('ocr')")
        assert [c.name for c in cur.description] == frozen
        cur = db.execute("SELECT * FROM scrinalia.claim_next('r1', '1 minute')")
        assert [c.name for c in cur.description] == frozen and cur.fetchone() is not None


def test_whether_periods_were_missed_is_asked_once_per_cron_zone_and_instant(db):
    """Thousands of schedules late on one cron (a scheduler back after an outage) are
    one question to cron_fires_between(), not one per run: its cost grows with the
    minutes waited."""
    names = [f"late{i:03d}" for i in range(300)]
    for w in names:
        make_worker(db, w)
        put_schedule(db, w, "*/5 * * * *", tz="UTC")
    tick(db)  # arm
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = date_trunc('hour', now()) - interval '2 hours'"
    )
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'pl'")
        due, decisions = tick(db)
        (calls,) = db.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
            " WHERE schemaname = 'scrinalia' AND funcname = 'cron_fires_between'"
        ).fetchone()
    assert [d[1] for d in decisions] == ["ENQUEUED"] * len(names)
    assert calls == 1
    assert {_catch_up(db, w) for w in names} == {True}
