"""The real scheduler process against the attacks of issues 9, 10 and 13: a login that
squats the lock key, a NOTIFY flood, the ADR's credentials, a poisoned schedule,
non-finite instants in rows, an idle scheduler's liveness, a frozen lock holder."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import psycopg
import pytest

from helpers import YEARLY, make_worker, make_workers, put_schedule
from scrinalia_workers.scheduler.leadership import SESSIONS_ENDED
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow


def _as(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


def _health(db):
    return db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()


def _stale_after(db, seconds: int) -> None:
    db.execute(
        "INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULER_STALE_AFTER', %s)", (f"{seconds} seconds",)
    )


def test_a_squatter_on_the_key_is_named_loudly_then_evicted_at_once(db, db_dsn, role_logins, procs):
    squatter = psycopg.connect(_as(db_dsn, role_logins["nobody"]), autocommit=True, application_name="not-a-scheduler")
    key = db.execute("SELECT scrinalia.scheduler_lock_key()").fetchone()[0]  # public knowledge
    try:
        assert squatter.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        healthy, reason = _health(db)
        assert not healthy and "sw_login_nobody" in reason and "not-a-scheduler" in reason
        a = procs.scheduler(db_dsn, "--standby-retry", "0.3")
        # not after a stale window (30 s here): it never wrote a heartbeat, so it is no scheduler
        evicted = a.wait_event("stale holder evicted", timeout=10)
        assert evicted["holder_role"] == "sw_login_nobody" and "without being a scheduler" in evicted["reason"]
        a.wait_event("lock acquired", timeout=5)
        assert a.count("standby") == 0
        wait_for(lambda: _health(db)[0], timeout=5, what="healthy once the real scheduler holds the lock")
        with pytest.raises(psycopg.OperationalError):
            squatter.execute("SELECT 1")
    finally:
        squatter.close()


def test_a_notify_flood_from_any_login_costs_a_few_passes(db, db_dsn, role_logins, procs):
    a = procs.scheduler(db_dsn, "--log-level", "DEBUG", "--max-sleep", "5")
    a.wait_event("lock acquired")
    a.wait_event("pass")
    mark = a.mark()
    sent = 0
    with psycopg.connect(_as(db_dsn, role_logins["nobody"]), autocommit=True) as attacker:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            attacker.execute("NOTIFY scrinalia_scheduler, 'wake'")
            sent += 1
    passes = sum(1 for e in a.events[mark:] if e.get("event") == "pass")
    assert sent > 1000
    # at most one wake-up per --min-wake-interval (0.2 s) and the max-sleep passes
    assert passes <= 3 / 0.2 + 3, (passes, sent)
    assert passes >= 3  # the wake-ups are coalesced, not ignored
    print(f"\nRELIABILITY NOTIFY flood: {sent} NOTIFYs in 3 s from a login in no group -> {passes} passes")


@pytest.mark.parametrize("group", ["operator", "runner", "scheduler"])
def test_the_adr_credentials_run_the_scheduler(db, db_dsn, role_logins, procs, group):
    make_worker(db)
    put_schedule(db, "ocr", "* * * * *", "UTC")
    a = procs.scheduler(_as(db_dsn, role_logins[group]))
    a.wait_event("lock acquired")
    a.wait_event("armed", worker="ocr")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
    db.execute("NOTIFY scrinalia_scheduler")
    a.wait_event("enqueued", worker="ocr")


@pytest.mark.parametrize("group", ["reader", "nobody"])
def test_a_login_that_cannot_schedule_gets_one_line_and_exit_2(db_dsn, role_logins, group):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", _as(db_dsn, role_logins[group])],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "cannot run the scheduler" in r.stderr and "GRANT scrinalia_scheduler TO" in r.stderr
    if group == "nobody":  # no group at all: the schema itself is out of reach, and it says so
        assert "USAGE on schema scrinalia" in r.stderr


def test_one_poisoned_schedule_never_stalls_or_spins_the_others(db, db_dsn, procs):
    healthy = make_workers(db, 40, "h")
    make_worker(db, "poison")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT w, '* * * * *', 'UTC' FROM unnest(%s::text[]) w",
        (healthy,),
    )
    # a zone the server knows but the scheduler's tzdata does not (an old image)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " VALUES ('poison', '* * * * *', 'Mars/Olympus', now() - interval '1 minute')"
    )
    a = procs.scheduler(db_dsn, "--log-level", "debug", "--max-sleep", "1")
    a.wait_event("lock acquired")
    aside = a.wait_event("schedule set aside", worker="poison")
    assert "Mars/Olympus" in aside["reason"]
    for w in healthy:
        a.wait_event("armed", worker=w)
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'"
        " WHERE worker_name <> 'poison'"
    )
    db.execute("NOTIFY scrinalia_scheduler")
    wait_for(
        lambda: db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == len(healthy),
        timeout=10,
        what="every healthy schedule enqueued",
    )
    mark = a.mark()
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 2, what="two seconds")
    passes = sum(1 for e in a.events[mark:] if e.get("event") == "pass")
    assert passes <= 2 / 1 + 3, passes  # idle: one pass per --max-sleep, not 120 a second
    assert a.count("schedule set aside", worker="poison") == 1  # retried a minute later, not at once
    row = db.execute(
        "SELECT arm_error, next_run_at FROM scrinalia.worker_agenda WHERE worker_name = 'poison'"
    ).fetchone()
    assert "Mars/Olympus" in row[0]
    healthy_now, reason = _health(db)
    assert not healthy_now and "poison" in reason and "set aside" in reason
    # fixing the zone clears the error and arms it
    db.execute("SELECT scrinalia.put_schedule('poison', '* * * * *', 'UTC')")
    a.wait_event("armed", worker="poison")
    assert (
        db.execute("SELECT arm_error FROM scrinalia.archive_worker_schedules WHERE worker_name = 'poison'").fetchone()[
            0
        ]
        is None
    )


def test_non_finite_instants_in_rows_neither_crash_nor_spin(db, db_dsn, procs):
    for w in ("inf", "neginf", "far", "ok", "nb", "lease_inf", "lease_neginf", "start_neginf"):
        make_worker(db, w)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) VALUES"
        " ('inf', '* * * * *', 'UTC', 'infinity'), ('neginf', '* * * * *', 'UTC', '-infinity'),"
        " ('far', '* * * * *', 'UTC', '9999-12-31 23:59:00+00'), ('ok', '* * * * *', 'UTC', now() - interval '1 minute')"
    )
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, not_before) VALUES ('nb', 'MANUAL', 'infinity')"
    )
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, lease_owner, lease_token,"
        " lease_duration, lease_expires_at, started_at, heartbeat_at) VALUES"
        " ('lease_inf', 'MANUAL', 'RUNNING', 'r', gen_random_uuid(), '1 minute', 'infinity', now(), now()),"
        " ('lease_neginf', 'MANUAL', 'RUNNING', 'r', gen_random_uuid(), '1 minute', '-infinity', now(), now()),"
        # an expired lease whose start is -infinity: its reap once failed every pass
        " ('start_neginf', 'MANUAL', 'RUNNING', 'r', gen_random_uuid(), '1 minute', now(), '-infinity', now())"
    )
    for attempt in range(2):  # and again after a restart
        a = procs.scheduler(db_dsn, "--log-level", "debug", "--max-sleep", "0.5")
        a.wait_event("lock acquired")
        if attempt == 0:
            a.wait_event("enqueued", worker="ok")
            a.wait_event("armed", worker="inf")
            a.wait_event("armed", worker="neginf")
            a.wait_event("lease reaped", worker="lease_neginf")
            a.wait_event("lease reaped", worker="start_neginf")
        mark = a.mark()
        t0 = time.monotonic()
        wait_for(lambda: time.monotonic() - t0 > 1.5, what="a second and a half")
        assert a.popen.poll() is None, "".join(a.raw[-20:])
        passes = sum(1 for e in a.events[mark:] if e.get("event") == "pass")
        assert passes <= 1.5 / 0.5 + 3, passes
        assert a.count("pass error") == 0, [e for e in a.events if e.get("event") == "pass error"]
        assert a.stop() == 0
    # year 9999 is later than any next occurrence of its cron: re-armed (sql/55_repair.sql)
    far, now = db.execute(
        "SELECT next_run_at, now() FROM scrinalia.archive_worker_schedules WHERE worker_name = 'far'"
    ).fetchone()
    assert far is None or far <= now + timedelta(minutes=1)


def test_instants_the_shim_cannot_read_neither_stop_nor_slow_the_scheduler(db, db_dsn, procs):
    """A hand-written next_run_at in 4713 BC (psycopg cannot load it), in year 1 (the
    zone arithmetic overflows) or in year 20000: before, the BC row sorted first into
    every pass's first chunk and failed it whole (DataError reading the tick's result),
    and next_wakeup() handed it to the sleep, so no schedule ticked at all. Now such a
    row is re-armed like 'infinity', with no run for it, and the others fire."""
    for w in ("bc", "year1", "y20k", "ok1", "ok2"):
        make_worker(db, w)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) VALUES"
        " ('bc', '0 0 * * *', 'America/New_York', '4713-01-01 00:00+00 BC'),"
        " ('year1', '0 0 * * *', 'America/New_York', '0001-01-01 00:00+00'),"
        " ('y20k', '0 0 * * *', 'UTC', '20000-01-01 00:00+00'),"
        " ('ok1', '* * * * *', 'UTC', now() - interval '1 minute'),"
        " ('ok2', '* * * * *', 'America/New_York', now() - interval '1 minute')"
    )
    a = procs.scheduler(db_dsn, "--log-level", "debug", "--max-sleep", "0.5")
    a.wait_event("lock acquired")
    for w in ("ok1", "ok2"):
        a.wait_event("enqueued", worker=w)
    for w in ("bc", "year1", "y20k"):
        a.wait_event("armed", worker=w)
    mark = a.mark()
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 1.5, what="a second and a half")
    assert a.popen.poll() is None, "".join(a.raw[-20:])
    passes = sum(1 for e in a.events[mark:] if e.get("event") == "pass")
    assert passes <= 1.5 / 0.5 + 3, passes  # sleeping on next_wakeup(), not spinning
    assert a.count("pass error") == 0, [e for e in a.events if e.get("event") == "pass error"]
    assert (
        db.execute(
            "SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name IN ('bc', 'year1', 'y20k')"
        ).fetchone()[0]
        == 0
    )
    assert (
        db.execute(
            "SELECT count(*) FROM scrinalia.archive_worker_schedules"
            " WHERE next_run_at > now() AND next_run_at < now() + interval '2 days'"
        ).fetchone()[0]
        == 5
    )
    assert a.stop() == 0


def test_an_idle_scheduler_stays_healthy_past_the_alert_threshold(db, db_dsn, procs):
    _stale_after(db, 2)
    a = procs.scheduler(db_dsn, "--max-sleep", "0.5")
    a.wait_event("lock acquired")
    first = db.execute("SELECT heartbeat_at FROM scrinalia.scheduler_state").fetchone()[0]
    assert first is not None
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 3, timeout=5, what="past the 2 s threshold")
    healthy, reason = _health(db)
    assert healthy, reason
    st = db.execute("SELECT heartbeat_at, last_tick_at FROM scrinalia.scheduler_state").fetchone()
    assert st[0] > first and st[1] is None  # alive although nothing was ever due
    # the documented alert (docs/operate.md) is quiet
    assert db.execute("SELECT NOT healthy FROM scrinalia.scheduler_health()").fetchone()[0] is False


def test_a_frozen_holder_is_replaced_and_does_not_tick_when_it_resumes(db, db_dsn, role_logins, procs):
    _stale_after(db, 2)
    workers = make_workers(db, 5, "f")
    # yearly: no instant of the wall clock makes them due during the test (a minutely
    # cron did whenever a minute began before the freeze: the frozen holder enqueued
    # that minute, and its successor then skipped); the test makes them due, by data
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT w, %s, 'UTC' FROM unnest(%s::text[]) w",
        (YEARLY, workers),
    )

    def due_now():
        db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
        db.execute("NOTIFY scrinalia_scheduler")

    # a scheduler login: a superuser's session is never ended by a standby
    sched = _as(db_dsn, role_logins["scheduler"])
    a = procs.scheduler(sched, "--standby-retry", "0.3", "--max-sleep", "0.3", "--name", "a")
    a.wait_event("lock acquired")
    for w in workers:
        a.wait_event("armed", worker=w)
    b = procs.scheduler(sched, "--standby-retry", "0.3", "--max-sleep", "0.3", "--name", "b")
    b.wait_event("standby")
    a_lock_pid = db.execute("SELECT holder_pid FROM scrinalia.scheduler_status()").fetchone()[0]
    assert b.count("stale holder evicted") == 0  # a live holder is left alone
    os.kill(a.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    evicted = b.wait_event("stale holder evicted")
    assert evicted["holder_pid"] == a_lock_pid and "stale holder" in evicted["reason"]
    b.wait_event("lock acquired")
    took = time.monotonic() - frozen
    due_now()
    for w in workers:
        b.wait_event("enqueued", worker=w)
    # from the moment the frozen holder resumes: it must notice the loss and not tick
    a_resumed, b_resumed = a.mark(), b.mark()
    os.kill(a.pid, signal.SIGCONT)
    # its sessions were ended while frozen: it meets a closed connection (not SW031,
    # which a session still open after losing the lock gets: tests/sql/test_lock_holder.py)
    lost = a.wait_event("lock lost", since=a_resumed)
    assert SESSIONS_ENDED in lost["reason"], lost
    due_now()  # the slots are still busy: the holder's pass skips them
    wait_for(
        lambda: sum(e.get("event") == "skipped" for e in b.events[b_resumed:]) >= len(workers),
        what="the new holder's pass after the resume",
    )
    ticks = [e for e in a.events[a_resumed:] if e.get("event") in ("pass", "enqueued", "skipped", "armed")]
    assert ticks == [], f"the resumed process ticked: {ticks}"
    periods = db.execute(
        "SELECT worker_name, scheduled_for, count(*) FROM scrinalia.archive_worker_runs"
        " GROUP BY 1, 2 HAVING count(*) > 1"
    ).fetchall()
    assert periods == []
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == len(workers)
    print(f"\nRELIABILITY frozen holder replaced in {took:.2f} s (stale after 2 s, standby retry 0.3 s)")


def test_a_notify_flood_costs_an_idle_runner_a_bounded_number_of_claims(db, db_dsn, role_logins, procs):
    make_worker(db, "ocr")
    r = procs.runner(db_dsn, "scrinalia_workers.demo.load_handlers", "--runner-id", "flooded")
    r.wait_event("runner started")
    sent = 0
    with psycopg.connect(_as(db_dsn, role_logins["nobody"]), autocommit=True) as attacker:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            attacker.execute("NOTIFY scrinalia_runs, 'ocr'")
            sent += 1
        # a real run enqueued in the flood is still claimed promptly
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
        wait_for(
            lambda: db.execute(
                "SELECT status = 'SUCCEEDED' FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)
            ).fetchone()[0],
            timeout=5,
            what="the run enqueued during the flood done",
        )
    assert r.stop() == 0
    claims = r.wait_event("stopped")["claim_attempts"]
    assert sent > 1000
    # at most one claim per min_wake_interval (0.05 s) while flooded, plus the run's own
    assert claims <= (time.monotonic() - t0) / 0.05 + 5, (claims, sent)
    print(f"\nRELIABILITY NOTIFY flood on scrinalia_runs: {sent} NOTIFYs -> {claims} claim attempts")
