"""The tick refuses a next instant that is not an occurrence of the schedule's cron in
its zone (nor the spring-forward instant standing for one): that schedule is REFUSED,
neither enqueued nor advanced, and set aside with the reason, which health and the
alerts show; the others in the same call are decided as usual, and once the set-aside
time has passed the next tick decides it (its period neither lost nor run twice)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from helpers import make_worker, next_occurrence, put_schedule, set_next_run, tick

TICK = (
    "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason"
    " FROM scrinalia.tick(%s::text[], %s::timestamptz[], 'test')"
)


def due(db, worker="ocr", cron="0 3 * * *", tz="UTC"):
    """`worker`'s schedule, armed, then due a minute ago: (its next_run_at, its cron's
    next occurrence after now())."""
    make_worker(db, worker)
    put_schedule(db, worker, cron, tz)
    tick(db, only=[worker])
    set_next_run(db, worker, "1 minute")
    was = db.execute("SELECT next_run_at FROM scrinalia.archive_worker_schedules WHERE worker_name = %s", (worker,))
    return was.fetchone()[0], next_occurrence(db, worker, "0 seconds")


def decide(db, pairs: dict):
    with db.transaction():
        db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()  # the rows, locked as the scheduler does
        return {r[0]: r[1:] for r in db.execute(TICK, (list(pairs), list(pairs.values()))).fetchall()}


def schedule(db, worker="ocr"):
    return db.execute(
        "SELECT next_run_at, arm_error, arm_retry_at > now(), last_run_id FROM scrinalia.archive_worker_schedules"
        " WHERE worker_name = %s",
        (worker,),
    ).fetchone()


def runs(db):
    return db.execute("SELECT worker_name, scheduled_for FROM scrinalia.archive_worker_runs ORDER BY run_id").fetchall()


@pytest.mark.parametrize(
    "wrong",
    [
        timedelta(minutes=17),  # 03:17 for 0 3 * * *
        timedelta(seconds=0.5),  # not a whole minute
        timedelta(days=365 * 7000, minutes=17),  # year ~9000, and not 03:00
    ],
)
def test_an_instant_the_cron_does_not_produce_is_refused(db, wrong):
    was, nxt = due(db)
    got = decide(db, {"ocr": nxt + wrong})
    decision, run_id, sched_for, stored_next, reason = got["ocr"]
    assert (decision, run_id, sched_for, stored_next) == ("REFUSED", None, was, was)
    assert '"0 3 * * *" does not fire then in UTC' in reason
    # neither enqueued nor advanced; set aside with the reason, tried again later
    assert runs(db) == []
    next_run_at, arm_error, later, _ = schedule(db)
    assert next_run_at == was and arm_error == reason and later
    assert db.execute("SELECT worker_name FROM scrinalia.due_schedules()").fetchall() == []
    # said: an alert, and health is not healthy about it
    alerts = db.execute("SELECT kind, worker_name FROM scrinalia.current_alerts()").fetchall()
    assert ("SCHEDULE_SET_ASIDE", "ocr") in alerts
    healthy, why, aside = db.execute(
        "SELECT healthy, reason, set_aside_schedules FROM scrinalia.scheduler_health()"
    ).fetchone()
    assert not healthy and aside == 1 and "ocr" in why


def test_one_refusal_stops_no_other_schedule_and_the_next_tick_fires_the_period_once(db):
    was, nxt = due(db, "bad")
    was_ok, nxt_ok = due(db, "good")
    got = decide(db, {"bad": nxt + timedelta(minutes=1), "good": nxt_ok})
    assert got["bad"][0] == "REFUSED" and got["good"][0] == "ENQUEUED"
    assert runs(db) == [("good", was_ok)]
    # once the set-aside time has passed, the next tick decides it: the same period, once
    db.execute("UPDATE scrinalia.archive_worker_schedules SET arm_retry_at = now() WHERE worker_name = 'bad'")
    _, decisions = tick(db, "0 seconds")
    assert [(d[0], d[1], d[3]) for d in decisions] == [("bad", "ENQUEUED", was)]
    assert runs(db) == [("good", was_ok), ("bad", was)]
    assert schedule(db, "bad")[:2] == (nxt, None)
    assert tick(db)[1] == []


def test_arming_with_a_wrong_instant_is_refused(db):
    make_worker(db)
    put_schedule(db, "ocr", "0 3 * * *", "UTC")
    now = db.execute("SELECT now()").fetchone()[0]
    got = decide(db, {"ocr": now.replace(second=0, microsecond=0) + timedelta(hours=1, minutes=1)})
    assert got["ocr"][0] == "REFUSED" and schedule(db)[0] is None


# Europe/Berlin: 2027-03-28 02:00 -> 03:00 (01:00 UTC); 2027-10-31 03:00 -> 02:00 (01:00 UTC)
SPRING = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
FOLD_FIRST = datetime(2027, 10, 31, 0, 30, tzinfo=UTC)  # 02:30 CEST
FOLD_SECOND = datetime(2027, 10, 31, 1, 30, tzinfo=UTC)  # 02:30 CET


@pytest.mark.parametrize(
    ("cron", "at", "decision"),
    [
        ("30 2 * * *", SPRING, "ARMED"),  # 02:30 does not exist: the first instant after the gap
        ("30 2 * * *", SPRING + timedelta(minutes=30), "REFUSED"),  # 03:30 is no occurrence
        ("30 2 * * *", FOLD_FIRST, "ARMED"),
        ("30 2 * * *", FOLD_SECOND, "REFUSED"),  # a fold's second pass fires only for hour '*'
        ("30 * * * *", FOLD_SECOND, "ARMED"),
    ],
)
def test_the_dst_rules_of_the_cron(db, cron, at, decision):
    make_worker(db)
    put_schedule(db, "ocr", cron, "Europe/Berlin")
    assert decide(db, {"ocr": at})["ocr"][0] == decision


def test_a_schedule_written_by_hand_is_checked_too(db):
    # no masks stored for its cron (not saved by put_schedule): checked the slow way
    for w in ("byhand", "nozone"):
        make_worker(db, w)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) VALUES"
        " ('byhand', '7 7 * * *', 'UTC'), ('nozone', '7 7 * * *', 'Mars/Olympus')"
    )
    assert db.execute("SELECT count(*) FROM scrinalia.archive_cron_masks WHERE cron = '7 7 * * *'").fetchone()[0] == 0
    at = datetime(2031, 5, 5, 7, 7, tzinfo=UTC)
    got = decide(db, {"byhand": at, "nozone": at})
    # a zone this server cannot load: refused, and the tick goes on with the others
    assert got["byhand"][0] == "ARMED" and got["nozone"][0] == "REFUSED"
    assert "Mars/Olympus" in got["nozone"][4]
    assert decide(db, {"byhand": at + timedelta(minutes=1)}) == {}  # armed: not due any more


def test_the_repair_stores_the_masks_of_schedules_written_by_hand(db):
    make_worker(db, "byhand")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) VALUES ('byhand', '9 9 * * *', 'UTC')"
    )
    masks = "SELECT minutes, hours FROM scrinalia.archive_cron_masks WHERE cron = '9 9 * * *'"
    assert db.execute(masks).fetchall() == []
    db.execute("SELECT * FROM scrinalia.repair_instants('test')").fetchall()
    assert db.execute(masks).fetchall() == [(1 << 9, 1 << 9)]


def test_a_bulk_load_by_hand_is_checked_by_masks_computed_in_the_tick(db):
    # 200 schedules inserted by hand (no masks stored): the tick computes the masks of
    # their one cron once, and the slow check runs for none of their right instants
    names = [f"h{i:03d}" for i in range(200)]
    db.execute("INSERT INTO scrinalia.archive_workers (worker_name) SELECT unnest(%s::text[])", (names,))
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT unnest(%s::text[]), '15 6 * * 1-5', 'Europe/Berlin'",
        (names,),
    )
    at = datetime(2031, 5, 5, 4, 15, tzinfo=UTC)  # Monday 06:15 CEST
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'pl'")
        db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()
        got = db.execute(TICK, (names, [at] * len(names))).fetchall()
        slow = db.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = 'tick_instant_refusal'"
        ).fetchone()[0]
    assert {r[1] for r in got} == {"ARMED"} and len(got) == 200
    assert slow == 0
