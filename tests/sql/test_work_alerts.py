"""The workers' alerts, work that stopped: a run overrunning (a share of its maximum run
time, or across its schedule's periods), a schedule whose last periods were all skipped
(starved), a QUEUED run no runner claims, a run ended at its maximum run time. Each in
current_alerts() and worker_metrics(), naming the worker and the run, read through the
live rows' indexes."""

from __future__ import annotations

from helpers import (
    claim,
    finish,
    make_worker,
    make_workers,
    nested_plans,
    put_schedule,
    scheduled_run,
    set_next_run,
    tick,
)

ALERTS = "SELECT kind, worker_name, run_ids, message FROM scrinalia.current_alerts() WHERE kind = %s"
METRICS = (
    "SELECT overrunning, starved, unclaimed, slot_run_id, skipped_in_a_row, running_seconds, max_run_time_seconds"
    " FROM scrinalia.worker_metrics() WHERE worker_name = %s"
)


def _alerts(db, kind):
    return db.execute(ALERTS, (kind,)).fetchall()


def _metrics(db, worker="ocr"):
    return db.execute(METRICS, (worker,)).fetchone()


def _started_ago(db, run_id, ago):
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - %s::interval WHERE run_id = %s",
        (ago, run_id),
    )


def _skip(db, n, worker="ocr"):
    """n periods of the worker's schedule come due and are decided (skipped: its slot is busy)."""
    for _ in range(n):
        set_next_run(db, worker, "1 minute")
        _, decisions = tick(db)
        assert [d[1] for d in decisions] == ["SKIPPED"]


def test_a_run_running_past_a_share_of_its_limit_is_an_overrunning_alert(db):
    make_worker(db)
    db.execute("SELECT scrinalia.enqueue('ocr')")
    run_id, token, *_ = claim(db)
    _started_ago(db, run_id, "10 minutes")
    db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    assert _alerts(db, "RUN_OVERRUNNING") == []
    assert _metrics(db)[:4] == (0, 0, 0, run_id)
    # 50 minutes of its hour (overrun_alert_share 0.8), heartbeated: still RUNNING, now an alert
    _started_ago(db, run_id, "50 minutes")
    db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    [(_, worker, run_ids, message)] = _alerts(db, "RUN_OVERRUNNING")
    assert (worker, run_ids) == ("ocr", [run_id])
    assert f"run #{run_id} of ocr has been RUNNING for 00:50:" in message
    assert "its maximum run time is 01:00:00" in message and f"scrinalia-workers cancel {run_id}" in message
    overrunning, _, _, slot, _, running, limit = _metrics(db)
    assert (overrunning, slot, limit) == (1, run_id, 3600.0) and 2990 < running < 3100
    # the scheduler's pass ends it at the hour: a RUN_TIMED_OUT alert instead
    _started_ago(db, run_id, "61 minutes")
    db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()")
    assert _alerts(db, "RUN_OVERRUNNING") == []
    [(_, worker, run_ids, message)] = _alerts(db, "RUN_TIMED_OUT")
    assert (worker, run_ids) == ("ocr", [run_id])
    assert "it ran longer than its maximum run time of 01:00:00" in message and "set_max_run_time" in message


def test_a_run_across_its_schedules_periods_is_overrunning_and_the_schedule_starved(db):
    make_worker(db)
    run_id = scheduled_run(db, "ocr")
    claim(db)
    _skip(db, 1)
    assert _alerts(db, "RUN_OVERRUNNING") == [] and _metrics(db)[4] == 1
    _skip(db, 1)
    [(_, worker, run_ids, message)] = _alerts(db, "RUN_OVERRUNNING")
    assert (worker, run_ids) == ("ocr", [run_id])
    assert "its schedule has skipped 2 period(s) in a row" in message
    assert _alerts(db, "SCHEDULE_STARVED") == []
    _skip(db, 1)
    [(_, worker, run_ids, message)] = _alerts(db, "SCHEDULE_STARVED")
    assert (worker, run_ids) == ("ocr", [run_id])
    assert message.startswith("the last 3 periods of ocr (* * * * *, UTC) were all skipped")
    assert f"run #{run_id} holds its slot, still running" in message
    assert _metrics(db)[:5] == (1, 1, 0, run_id, 3)


def test_a_starved_schedule_ends_with_the_next_period_enqueued(db):
    make_worker(db)
    run_id = scheduled_run(db, "ocr")
    _skip(db, 3)  # (its run QUEUED, never claimed)
    [(_, _, run_ids, message)] = _alerts(db, "SCHEDULE_STARVED")
    assert run_ids == [run_id] and "holds its slot, queued: is a runner claiming it?" in message
    _, token, *_ = claim(db)
    finish(db, run_id, token)
    set_next_run(db, "ocr", "1 minute")
    _, decisions = tick(db)
    assert [d[1] for d in decisions] == ["ENQUEUED"]
    assert _alerts(db, "SCHEDULE_STARVED") == [] and _metrics(db)[4] == 0
    # a pause counts again from its resume
    _skip(db, 3)
    assert len(_alerts(db, "SCHEDULE_STARVED")) == 1
    put_schedule(db, "ocr", "* * * * *", "UTC", enabled=False)
    put_schedule(db, "ocr", "* * * * *", "UTC", enabled=True)
    assert _alerts(db, "SCHEDULE_STARVED") == []


def test_a_queued_run_no_runner_claims_is_an_alert(db):
    make_worker(db)
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
    assert _alerts(db, "RUN_UNCLAIMED") == []
    db.execute("UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '6 minutes'")
    [(_, worker, run_ids, message)] = _alerts(db, "RUN_UNCLAIMED")
    assert (worker, run_ids) == ("ocr", [run_id])
    assert (
        f"run #{run_id} of ocr (MANUAL) has been claimable since" in message and "no runner has claimed it" in message
    )
    assert _metrics(db)[2:4] == (1, run_id)
    # a retry waiting for its moment is not claimable yet
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() + interval '1 minute'")
    assert _alerts(db, "RUN_UNCLAIMED") == [] and _metrics(db)[2] == 0


def test_worker_metrics_applies_the_unclaimed_rule_on_the_live_rows_it_reads(db):
    """worker_metrics()'s unclaimed flags the workers unclaimed_runs() names, whatever the
    case (old or new, claimable or not yet, created long ago but made claimable lately,
    a hand-written -infinity or +infinity, running); and it tests the rule on the live
    rows it reads for the slot, not by a second read of the QUEUED runs."""
    cases = {
        "old": "created_at = now() - interval '6 minutes'",
        "new": "created_at = now() - interval '4 minutes'",
        "later": "created_at = now() - interval '6 minutes', not_before = now() + interval '1 minute'",
        "lately": "created_at = now() - interval '6 minutes', not_before = now() - interval '4 minutes'",
        "long_due": "created_at = now() - interval '6 minutes', not_before = now() - interval '10 minutes'",
        "minus_inf": "created_at = now() - interval '6 minutes', not_before = '-infinity'",
        "plus_inf": "created_at = now() - interval '6 minutes', not_before = 'infinity'",
        "running": "created_at = now() - interval '6 minutes'",
        "idle": None,
    }
    for name, change in cases.items():
        make_worker(db, name)
        if change is None:
            continue
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (name,)).fetchone()[0]
        db.execute(f"UPDATE scrinalia.archive_worker_runs SET {change} WHERE run_id = %s", (run_id,))
    assert claim(db, workers=["running"])[2] == "running"

    def flagged():
        rows = db.execute("SELECT worker_name, unclaimed FROM scrinalia.worker_metrics()").fetchall()
        named = {r[0] for r in db.execute("SELECT worker_name FROM scrinalia.unclaimed_runs()")}
        assert {w for w, u in rows if u == 1} == named
        return named

    assert flagged() == {"old", "long_due", "minus_inf"}
    # two minutes on: the new run and the one claimable lately have waited long enough
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = created_at - interval '2 minutes',"
        " not_before = not_before - interval '2 minutes'"
    )
    assert flagged() == {"old", "new", "lately", "long_due", "minus_inf"}

    plans = nested_plans(db)
    db.execute("SELECT count(*) FROM scrinalia.worker_metrics()").fetchone()
    [plan] = [p for p in plans if "FROM scrinalia.archive_workers w" in p]
    # (inlined or not, a second read of the QUEUED runs goes through ix_worker_runs_queued)
    assert "Function Scan on unclaimed_runs" not in plan and "ix_worker_runs_queued" not in plan
    assert "uq_worker_run_active" in plan


def test_the_alerts_read_no_history(db):
    """With a large finished ledger, current_alerts() reads the runs through indexes only."""
    names = make_workers(db, 200)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, started_at, finished_at,"
        " error, error_fingerprint)"
        " SELECT w, 'MANUAL', 'FAILED', now() - interval '2 days', now() - interval '2 days', 'x', 'fp'"
        " FROM unnest(%s::text[]) w, generate_series(1, 100)",
        (names,),
    )
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'scrinalia.archive_worker_runs'::regclass"
    with db.transaction():
        before = db.execute(scans).fetchone()[0]
        db.execute("SELECT count(*) FROM scrinalia.current_alerts()").fetchone()
        assert db.execute(scans).fetchone()[0] == before
        # (the counter does see a scan of the history)
        db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE error = 'y'").fetchone()
        assert db.execute(scans).fetchone()[0] == before + 1


def test_worker_metrics_applies_the_overdue_and_starved_rules_of_the_alerts(db):
    """worker_metrics() tests each schedule row with the rules overdue_schedules() and
    starved_schedules() apply (schedule_is_overdue(), schedule_is_starved()): the same
    workers, whatever the case, and the grace read from the settings."""
    for name in ("late", "fresh", "paused", "aside", "unarmed", "starved", "plain"):
        make_worker(db, name)
        put_schedule(db, name, "* * * * *", "UTC", enabled=name != "paused")
    for name in ("late", "paused", "aside"):
        set_next_run(db, name, "10 minutes")
    set_next_run(db, "fresh", "30 seconds")  # (within the default grace of 1 minute)
    db.execute("UPDATE scrinalia.archive_worker_schedules SET arm_error = 'no such zone' WHERE worker_name = 'aside'")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = NULL, updated_at = now() - interval '1 hour'"
        " WHERE worker_name = 'unarmed'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET skipped_count = 7, skipped_count_at_enqueue = 4"
        " WHERE worker_name IN ('starved', 'paused')"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET skipped_count = 7, skipped_count_at_enqueue = 5"
        " WHERE worker_name = 'plain'"
    )

    def flagged():
        rows = db.execute("SELECT worker_name, overdue, starved FROM scrinalia.worker_metrics()").fetchall()
        overdue = {r[0] for r in db.execute("SELECT worker_name FROM scrinalia.overdue_schedules()")}
        starved = {r[0] for r in db.execute("SELECT worker_name FROM scrinalia.starved_schedules()")}
        assert {w for w, o, _ in rows if o == 1} == overdue
        assert {w for w, _, s in rows if s == 1} == starved
        return overdue, starved

    assert flagged() == ({"late", "unarmed"}, {"starved"})
    db.execute("INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULE_OVERDUE_GRACE', '20 seconds')")
    assert flagged()[0] == {"late", "unarmed", "fresh"}
    db.execute("UPDATE scrinalia.settings SET value = '2 hours' WHERE name = 'SCHEDULE_OVERDUE_GRACE'")
    assert flagged()[0] == set()
