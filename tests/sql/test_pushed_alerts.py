"""Pushed alerts: every alert of current_alerts(), each kind, is sent once on the channel
scrinalia_alerts (a bounded JSON naming it), however many checks see it, and again when
it clears and comes back; a reader's and a monitor's login LISTEN with no grant. The
checks are paced by an instant the database keeps (moved here as data), and the
scheduler's pass is what sends them."""

from __future__ import annotations

import json
import uuid

import psycopg

from helpers import claim, finish, lock_holding_scheduler, make_worker, make_workers, plan_reads, raises_sqlstate

CHANNEL = "scrinalia_alerts"
SENTINEL = "--end of the check--"
KINDS = {
    "SCHEDULER_UNHEALTHY",
    "FAILED_AFTER_ALL_ATTEMPTS",
    "SCHEDULE_OVERDUE",
    "SCHEDULE_SET_ASIDE",
    "LEASE_REAPED",
    "INSTANT_REPAIRED",
    "RUN_OVERRUNNING",
    "SCHEDULE_STARVED",
    "RUN_UNCLAIMED",
    "RUN_TIMED_OUT",
    "RUNNER_STUCK",
}
# a schedule that is not due (its worker's alerts are made by hand below)
QUIET = (
    "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
    " VALUES (%s, '0 0 1 1 *', 'UTC', now() + interval '1 day')"
)


def listener(connect_as, group: str) -> psycopg.Connection:
    c = connect_as(group)
    c.execute(f"LISTEN {CHANNEL}")
    return c


def heard(listen: psycopg.Connection, db: psycopg.Connection) -> list[dict]:
    """What the listener got up to now: a NOTIFY sent after the checks, delivered after
    theirs (a listener gets them in commit order), marks the end; no waiting on time."""
    mark = f"{SENTINEL} {uuid.uuid4()}"  # its own: another listener's marks reach this one too
    db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, mark))
    got = []
    for n in listen.notifies(timeout=30):
        if n.payload == mark:
            return got
        if n.payload.startswith(SENTINEL):
            continue
        assert len(n.payload.encode()) < 8000
        got.append(json.loads(n.payload))
    raise AssertionError(f"the end marker never came; heard {got}")


def owner_session(db_dsn: str, timezone: str = "UTC", datestyle: str = "ISO, MDY") -> psycopg.Connection:
    """A session that may announce outside a scheduler's pass: the schema owner's
    (check_scheduler_caller), under its own TimeZone and DateStyle."""
    c = psycopg.connect(db_dsn, autocommit=True)
    c.execute("SELECT set_config('TimeZone', %s, false), set_config('DateStyle', %s, false)", (timezone, datestyle))
    return c


def check(announcer: psycopg.Connection, db: psycopg.Connection) -> int | None:
    """One check, as the scheduler's pass makes it, its pace moved back first."""
    db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now() - interval '1 hour'")
    return announcer.execute("SELECT scrinalia.announce_alerts()").fetchone()[0]


def make_all(db) -> dict[str, int]:
    """One worker per kind of alert (the scheduler's health is unhealthy already: no
    scheduler holds the lock). Returns the runs made, by name."""
    names = ("wfail", "wover", "waside", "wreap", "wtime", "wrep", "wrun", "wstarve", "wqueue")
    for w in names:
        make_worker(db, w)
    for w in ("wfail", "wover", "waside", "wrep", "wstarve"):
        db.execute(QUIET, (w,))
    [(first,)] = db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, scheduled_for, finished_at) "
        "VALUES ('wfail', 'SCHEDULE', 'FAILED', '2026-01-01', now()) RETURNING run_id"
    ).fetchall()
    runs = {"failed": first}
    for w in ("wreap", "wtime", "wrun", "wqueue"):
        runs[w] = db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (w,)).fetchone()[0]
        if w != "wqueue":
            claim(db, workers=[w])
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 minute' WHERE run_id = %s",
        (runs["wreap"],),
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - interval '61 minutes' WHERE run_id = %s",
        (runs["wtime"],),
    )
    assert len(db.execute("SELECT * FROM scrinalia.reap_expired_leases()").fetchall()) == 2
    db.execute("SELECT scrinalia.report_runner_stuck('r1', %s, 1, '1 minute')", ([runs["wreap"]],))
    appear(db, runs)
    return runs


def appear(db, runs) -> None:
    """Every alert of make_all() on (again), each with the same identity as before."""
    db.execute("UPDATE scrinalia.archive_worker_runs SET status = 'FAILED' WHERE run_id = %s", (runs["failed"],))
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '10 minutes'"
        " WHERE worker_name = 'wover'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET arm_error = 'cannot compute', arm_error_since = '2026-01-01',"
        " arm_retry_at = now() + interval '1 hour' WHERE worker_name = 'waside'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = now() - interval '1 minute' WHERE run_id = ANY (%s)",
        ([runs["wreap"], runs["wtime"]],),
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET last_skipped_at = now() - interval '1 minute',"
        " last_skip_reason = 'instant repaired: next_run_at was ten years ahead' WHERE worker_name = 'wrep'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - interval '50 minutes' WHERE run_id = %s",
        (runs["wrun"],),
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET skipped_count = skipped_count_at_enqueue + 3,"
        " last_skipped_at = now() WHERE worker_name = 'wstarve'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '6 minutes' WHERE run_id = %s",
        (runs["wqueue"],),
    )
    db.execute("UPDATE scrinalia.runner_stalls SET reported_at = now() WHERE runner = 'r1'")


def clear_all(db, runs) -> None:
    """Every alert of make_all() off (the scheduler's health is made healthy by a holder)."""
    db.execute("UPDATE scrinalia.archive_worker_runs SET status = 'SUCCEEDED' WHERE run_id = %s", (runs["failed"],))
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 day'"
        " WHERE worker_name = 'wover'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET arm_error = NULL, arm_error_since = NULL, arm_retry_at = NULL"
        " WHERE worker_name = 'waside'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = now() - interval '2 hours' WHERE run_id = ANY (%s)",
        ([runs["wreap"], runs["wtime"]],),
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET last_skipped_at = now() - interval '2 hours'"
        " WHERE worker_name = 'wrep'"
    )
    db.execute("UPDATE scrinalia.archive_worker_runs SET started_at = now() WHERE run_id = %s", (runs["wrun"],))
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET skipped_count = skipped_count_at_enqueue"
        " WHERE worker_name = 'wstarve'"
    )
    db.execute("UPDATE scrinalia.archive_worker_runs SET created_at = now() WHERE run_id = %s", (runs["wqueue"],))
    db.execute(
        "UPDATE scrinalia.runner_stalls SET reported_at = now() - scrinalia.runner_stall_alert_window() - interval '1s',"
        " exits_at = now() - scrinalia.runner_stall_alert_window() - interval '1s' WHERE runner = 'r1'"
    )


def kinds(got: list[dict]) -> list[str]:
    return sorted(g["kind"] for g in got)


def test_each_kind_is_sent_once_and_again_when_it_comes_back(db, db_dsn, connect_as):
    reader, monitor = listener(connect_as, "reader"), listener(connect_as, "monitor")
    announcer, elsewhere = announcer_pair = (
        owner_session(db_dsn),
        # another session, its instants written otherwise: the same alerts all the same
        owner_session(db_dsn, "Pacific/Chatham", "SQL, DMY"),
    )
    runs = make_all(db)
    now_kinds = {k for (k,) in db.execute("SELECT kind FROM scrinalia.current_alerts()").fetchall()}
    assert now_kinds == KINDS  # (each kind is made above, one alert each)

    assert check(announcer, db) == len(KINDS)
    assert check(elsewhere, db) == 0
    assert check(announcer, db) == 0
    for who in (reader, monitor):
        got = heard(who, db)
        assert kinds(got) == sorted(KINDS)  # once each across three checks
    for c in announcer_pair:
        c.close()
    announcer = psycopg.connect(db_dsn, autocommit=True)
    by_kind = {g["kind"]: g for g in got}
    assert by_kind["RUN_UNCLAIMED"] == {
        "kind": "RUN_UNCLAIMED",
        "worker": "wqueue",
        "since": by_kind["RUN_UNCLAIMED"]["since"],
        "run_ids": [runs["wqueue"]],
        "run_ids_total": 1,
    }
    assert by_kind["SCHEDULER_UNHEALTHY"]["worker"] is None
    assert by_kind["FAILED_AFTER_ALL_ATTEMPTS"]["run_ids"] == [runs["failed"]]

    # all clear (a scheduler holds the lock and heartbeats: healthy): nothing is sent,
    # and what was sent is forgotten
    with lock_holding_scheduler(db_dsn, "alerts-holder"):
        clear_all(db, runs)
        assert db.execute("SELECT count(*) FROM scrinalia.current_alerts()").fetchone()[0] == 0
        assert check(announcer, db) == 0
        assert db.execute("SELECT count(*) FROM scrinalia.announced_alerts").fetchone()[0] == 0
    assert heard(reader, db) == []

    # back again, the same alerts: sent again, once each
    appear(db, runs)
    assert check(announcer, db) == len(KINDS)
    assert check(announcer, db) == 0
    assert kinds(heard(reader, db)) == sorted(KINDS)


def test_the_checks_are_paced_by_the_stored_instant(db, db_dsn, connect_as):
    reader = listener(connect_as, "reader")
    announcer = psycopg.connect(db_dsn, autocommit=True)
    assert check(announcer, db) == 1  # SCHEDULER_UNHEALTHY: nobody holds the lock
    make_worker(db)
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
    db.execute("UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '6 minutes'")
    # checked a moment ago: not again before alert_check_interval()
    db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now() - interval '9 seconds'")
    assert announcer.execute("SELECT scrinalia.announce_alerts()").fetchone()[0] is None
    assert kinds(heard(reader, db)) == ["SCHEDULER_UNHEALTHY"]
    db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now() - interval '10 seconds'")
    assert announcer.execute("SELECT scrinalia.announce_alerts()").fetchone()[0] == 1
    [got] = heard(reader, db)
    assert (got["kind"], got["run_ids"]) == ("RUN_UNCLAIMED", [run_id])


def test_a_long_list_of_run_ids_is_cut(db, db_dsn, connect_as):
    """A payload names at most max_alert_run_ids() runs and says how many there are."""
    reader = listener(connect_as, "reader")
    db.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('w' || repeat('x', 62))")
    db.execute(QUIET, ("w" + "x" * 62,))
    ids: list[int] = []
    for attempt in range(1, 31):  # (a chain written by hand, longer than any policy makes)
        ids.append(
            db.execute(
                "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, scheduled_for,"
                " finished_at, attempt, retry_of) VALUES (%s, 'SCHEDULE', 'FAILED', '2026-01-01', now(), %s, %s)"
                " RETURNING run_id",
                ("w" + "x" * 62, attempt, ids[-1] if ids else None),
            ).fetchone()[0]
        )
    check(psycopg.connect(db_dsn, autocommit=True), db)
    [failed] = [g for g in heard(reader, db) if g["kind"] == "FAILED_AFTER_ALL_ATTEMPTS"]
    assert failed["run_ids"] == ids[:20] and failed["run_ids_total"] == 30


def test_the_schedulers_pass_sends_them_once(db, db_dsn, connect_as):
    reader = listener(connect_as, "reader")
    make_worker(db, "lost")
    make_worker(db, "idle")
    lost = db.execute("SELECT run_id FROM scrinalia.enqueue('lost')").fetchone()[0]
    _, token, *_ = claim(db, workers=["lost"])
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 minute'")
    with lock_holding_scheduler(db_dsn, "alerts-pass") as s:
        s.tick()  # reaps the lost runner's run: a LEASE_REAPED alert, sent by the same pass
        got = heard(reader, db)
        assert [(g["kind"], g["worker"], g["run_ids"]) for g in got] == [("LEASE_REAPED", "lost", [lost])]
        for _ in range(3):
            db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now() - interval '1 hour'")
            s.tick()
        assert heard(reader, db) == []
        idle = db.execute("SELECT run_id FROM scrinalia.enqueue('idle')").fetchone()[0]
        db.execute(
            "UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '6 minutes' WHERE run_id = %s",
            (idle,),
        )
        db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now() - interval '1 hour'")
        s.tick()
        assert [(g["kind"], g["run_ids"]) for g in heard(reader, db)] == [("RUN_UNCLAIMED", [idle])]


def test_a_check_among_many_standing_alerts_costs_no_probe_per_alert(db, db_dsn, connect_as):
    """A runner down under a full queue: thousands of RUN_UNCLAIMED alerts stand, each
    announced once. A later check sends only what is new, forgets what cleared, and
    reads the announced alerts in one pass, not once per standing alert (the scheduler
    makes the check every alert_check_interval(), and a due schedule waits for it)."""
    reader = listener(connect_as, "reader")
    names = make_workers(db, 3000)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, created_at)"
        " SELECT w, 'MANUAL', now() - interval '10 minutes' FROM unnest(%s::text[]) w",
        (names[1:],),
    )
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    announcer = owner_session(db_dsn)
    assert check(announcer, db) == len(names)  # each unclaimed run, and the scheduler's health
    assert len(heard(reader, db)) == len(names)
    db.execute("ANALYZE scrinalia.announced_alerts")
    fresh = db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, created_at)"
        " VALUES (%s, 'MANUAL', now() - interval '10 minutes') RETURNING run_id",
        (names[0],),
    ).fetchone()[0]
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET status = 'CANCELLED', finished_at = now() WHERE worker_name = %s",
        (names[1],),
    )
    db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now() - interval '1 hour'")
    _, read = plan_reads(announcer, "SELECT scrinalia.announce_alerts()")
    assert [(g["kind"], g["worker"], g["run_ids"]) for g in heard(reader, db)] == [("RUN_UNCLAIMED", names[0], [fresh])]
    standing = db.execute("SELECT count(*) FROM scrinalia.announced_alerts").fetchone()[0]
    assert standing == len(names)
    assert (
        db.execute("SELECT count(*) FROM scrinalia.announced_alerts WHERE worker_name = %s", (names[1],)).fetchone()[0]
        == 0
    )
    # (the runs' rows and the table once: fewer pages than alerts; a probe of the
    # table's key for each took three or four times as many)
    assert read < standing


def test_only_the_schedulers_session_announces(db, connect_as):
    """A group login that may run the scheduler, not holding its lock, is refused: an
    alert is sent by the scheduler's pass alone, and the pace it keeps is not moved."""
    for group in ("scheduler", "operator", "runner"):
        with raises_sqlstate("SW032"):
            connect_as(group).execute("SELECT scrinalia.announce_alerts()")
    for group in ("reader", "monitor"):
        with raises_sqlstate("42501"):
            connect_as(group).execute("SELECT scrinalia.announce_alerts()")
    assert db.execute("SELECT alerts_checked_at FROM scrinalia.scheduler_chores").fetchone()[0] is None


def test_a_check_folds_the_histories_tallies_first(db, db_dsn):
    """What current_alerts() reads of the periods is folded by the scheduler's check, so
    a reader's status after it reads tallies, not every run's delta since the last
    scrape (where no exporter scrapes, nothing else folds)."""
    make_worker(db, "wfold")
    for _ in range(3):
        db.execute("SELECT run_id FROM scrinalia.enqueue('wfold')")
        run_id, token, *_ = claim(db, workers=["wfold"])
        finish(db, run_id, token)
    pending = "SELECT count(*) FROM scrinalia.run_tally_delta"
    assert db.execute(pending).fetchone()[0] > 0
    announcer = owner_session(db_dsn)
    assert check(announcer, db) is not None
    assert db.execute(pending).fetchone()[0] == 0
