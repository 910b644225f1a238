"""The ledger as a queue: validation, config resolution, the one slot, the leased claim."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import (
    YEARLY,
    claim,
    finish,
    make_worker,
    make_workers,
    next_occurrence,
    raises_sqlstate,
    run_row,
)


def enqueue(conn, worker="ocr", request=None, trigger="MANUAL", by="alice"):
    return conn.execute(
        "SELECT run_id, status, trigger, config, config_sources FROM scrinalia.enqueue(%s, %s, %s, %s)",
        (worker, Jsonb(request if request is not None else {}), trigger, by),
    ).fetchone()


# -- request validation ------------------------------------------------------------


def test_unknown_worker_is_named(db):
    with raises_sqlstate("SW001", "unknown worker 'nope'"):
        enqueue(db, "nope")


@pytest.mark.parametrize(
    "request_, fragment",
    [
        ({"engine": "abbyy"}, "unknown engine 'abbyy'"),
        ({"engine": 3}, "engine must be a string"),
        ({"preset": "slow"}, "unknown preset 'slow'"),
        ({"options": {"colour": True}}, "unknown options key 'colour'"),
        ({"options": {"dpi": "300"}}, "options.dpi must be an integer, got string"),
        ({"options": {"dpi": 1.5}}, "options.dpi must be an integer"),
        ({"options": {"lang": "deu"}}, "options.lang must be one of"),
        ({"options": {"deskew": 1}}, "options.deskew must be a boolean"),
        ({"options": {"threshold": "x"}}, "options.threshold must be a number"),
        ({"options": []}, "options must be an object"),
        ({"engine_options": {"psm": "x"}}, "engine_options (engine tesseract).psm must be an integer"),
        ({"engine": "easyocr", "engine_options": {"psm": 3}}, "unknown engine_options (engine easyocr) key 'psm'"),
        ({"engine_options": {"oem": 9}}, "must be one of"),
        ({"priority": 1}, "unknown key 'priority'"),
    ],
)
def test_request_validation_names_the_offending_part(db, request_, fragment):
    make_worker(db)
    with raises_sqlstate("SW002", fragment):
        enqueue(db, request=request_)
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 0


def test_request_must_be_an_object_of_bounded_size(db):
    make_worker(db)
    with raises_sqlstate("SW002", "must be a JSON object, got array"):
        enqueue(db, request=[1, 2])
    with raises_sqlstate("SW002", "the limit is 65536"):
        enqueue(db, request={"options": {"lang": "x" * 70000}})


def test_valid_request_is_accepted(db):
    make_worker(db)
    run = enqueue(
        db,
        request={
            "engine": "tesseract",
            "preset": "fast",
            "options": {"lang": "eng", "deskew": True, "threshold": 0.5},
            "engine_options": {"psm": 6, "oem": 1},
        },
    )
    assert run[1] == "QUEUED"


# -- config resolution: explicit > settings > signature default ----------------------


def test_config_resolution_precedence_is_recorded_on_the_run(db):
    make_worker(db)
    db.execute(
        "SELECT scrinalia.put_settings('ocr', %s, 'bob')", (Jsonb({"options": {"lang": "eng", "deskew": True}}),)
    )
    run_id, _, _, config, sources = enqueue(db, request={"options": {"deskew": False}})
    assert config["engine"] == "tesseract" and sources["engine"] == "default"
    assert config["options"] == {"dpi": 300, "lang": "eng", "deskew": False}
    assert sources["options"] == {"dpi": "default", "lang": "settings", "deskew": "request"}
    assert run_row(db, run_id)["config"] == config


def test_preset_sits_between_settings_and_the_explicit_options(db):
    make_worker(db)
    db.execute("SELECT scrinalia.put_settings('ocr', %s)", (Jsonb({"options": {"dpi": 200}}),))
    _, _, _, config, sources = enqueue(db, request={"preset": "archival", "options": {"deskew": False}})
    assert config["preset"] == "archival"
    assert config["options"]["dpi"] == 600 and sources["options"]["dpi"] == "preset"
    assert config["options"]["deskew"] is False and sources["options"]["deskew"] == "request"


def test_settings_are_validated_like_a_request(db):
    make_worker(db)
    with raises_sqlstate("SW002", "options.dpi must be an integer"):
        db.execute("SELECT scrinalia.put_settings('ocr', %s)", (Jsonb({"options": {"dpi": "hi"}}),))


# -- enqueue and the one slot ------------------------------------------------------


def test_enqueue_manual_and_cli(db):
    make_worker(db)
    run_id, status, trigger, _, _ = enqueue(db, trigger="CLI", by="cron-job")
    assert (status, trigger) == ("QUEUED", "CLI")
    row = run_row(db, run_id)
    assert row["attempt"] == 1 and row["retry_of"] is None and row["requested_by"] == "cron-job"


def test_enqueue_refuses_the_schedule_trigger(db):
    make_worker(db)
    with raises_sqlstate("SW002", "enqueue takes trigger MANUAL or CLI"):
        enqueue(db, trigger="SCHEDULE")


def test_second_enqueue_names_the_active_run(db):
    make_worker(db)
    run_id = enqueue(db)[0]
    with raises_sqlstate("SW010", f"run #{run_id} QUEUED (MANUAL)"):
        enqueue(db)
    r = claim(db)
    with raises_sqlstate("SW010", f"run #{run_id} RUNNING"):
        enqueue(db)
    finish(db, r[0], r[1])
    assert enqueue(db)[1] == "QUEUED"


def test_slot_error_for_a_retry_names_its_not_before(db):
    make_worker(db)
    db.execute("""
        INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, scheduled_for, finished_at)
        VALUES ('ocr', 'SCHEDULE', 'FAILED', '2026-01-01', now())""")
    first = db.execute("SELECT max(run_id) FROM scrinalia.archive_worker_runs").fetchone()[0]
    db.execute(
        """
        INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, attempt, retry_of, not_before, scheduled_for)
        VALUES ('ocr', 'SCHEDULE', 2, %s, '2999-01-01T00:00:00Z', '2026-01-01')""",
        (first,),
    )
    with raises_sqlstate("SW010", "SCHEDULE attempt 2/3", "retry not before 2999-01-01T00:00:00Z"):
        enqueue(db)


def test_concurrent_enqueues_never_break_the_slot(db, db_dsn):
    make_worker(db)
    barrier = threading.Barrier(8)
    outcomes = []

    def go():
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            barrier.wait()
            try:
                enqueue(conn)
                outcomes.append("ok")
            except psycopg.Error as e:
                outcomes.append(e.sqlstate)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["SW010"] * 7 + ["ok"]
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 1


# -- claim, heartbeat, finish, reap -------------------------------------------------


def test_claim_sets_the_lease_and_returns_nothing_when_empty(db):
    make_worker(db)
    assert claim(db) is None
    run_id = enqueue(db)[0]
    got = claim(db, runner="runner-a", lease="30 seconds")
    assert got[0] == run_id
    row = run_row(db, run_id)
    assert row["status"] == "RUNNING" and row["lease_owner"] == "runner-a"
    assert row["lease_token"] == got[1] and row["started_at"] is not None
    left = db.execute(
        "SELECT lease_expires_at - now() FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)
    ).fetchone()[0]
    assert 29 <= left.total_seconds() <= 30
    assert claim(db) is None


def test_claim_honours_not_before(db):
    make_worker(db)
    run_id = enqueue(db)[0]
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() + interval '1 minute'")
    assert claim(db) is None
    assert db.execute("SELECT scrinalia.next_claimable_at()").fetchone()[0] is not None
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() - interval '1 second'")
    assert claim(db)[0] == run_id


def test_claim_filters_by_worker(db):
    make_worker(db, "ocr")
    make_worker(db, "thumbs")
    enqueue(db, "ocr")
    thumbs = enqueue(db, "thumbs")[0]
    assert claim(db, workers=["thumbs"])[0] == thumbs
    assert claim(db, workers=["thumbs"]) is None


def test_claim_validates_runner_and_lease(db):
    with raises_sqlstate("SW022", "invalid runner id"):
        claim(db, runner="bad runner; drop")
    with raises_sqlstate("SW022", "invalid lease"):
        claim(db, lease="0 seconds")


def test_concurrent_claimers_never_share_a_row(db, db_dsn):
    names = [f"w{i:03d}" for i in range(120)]
    for n in names:
        make_worker(db, n)
        enqueue(db, n)
    claimed: list[list[int]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def go(i):
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            barrier.wait()
            while (r := claim(conn, runner=f"r{i}")) is not None:
                claimed[i].append(r[0])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [x for c in claimed for x in c]
    assert len(every) == len(set(every)) == 120


def test_heartbeat_extends_and_is_fenced(db):
    make_worker(db)
    enqueue(db)
    run_id, token = claim(db, lease="10 seconds")[:2]
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() + interval '1 second'")
    expires = db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token)).fetchone()[0]
    left = db.execute("SELECT %s - now()", (expires,)).fetchone()[0]
    assert left.total_seconds() > 9
    with raises_sqlstate("SW020", "another lease holds it"):
        db.execute("SELECT scrinalia.heartbeat(%s, gen_random_uuid())", (run_id,))
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second'")
    with raises_sqlstate("SW020", "the lease expired"):
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))


def test_finish_reports_success_and_failure(db):
    make_worker(db)
    enqueue(db)
    run_id, token = claim(db)[:2]
    status, error, fp, duration, pending = finish(db, run_id, token)
    assert (status, error, fp, pending) == ("SUCCEEDED", None, None, False)
    assert duration is not None
    enqueue(db)
    run_id, token = claim(db)[:2]
    status, error, fp, duration, pending = finish(db, run_id, token, "FAILED", "OSError: disk 3 full")
    assert status == "FAILED" and error == "OSError: disk 3 full" and fp
    assert pending is False  # a MANUAL run is never retried
    # the fingerprint ignores numbers, so the same failure groups together
    enqueue(db)
    run2, token2 = claim(db)[:2]
    assert finish(db, run2, token2, "FAILED", "OSError: disk 7 full")[2] == fp


def test_finish_only_by_the_lease_holder_and_only_once(db):
    make_worker(db)
    enqueue(db)
    run_id, token = claim(db)[:2]
    with raises_sqlstate("SW020", f"lease lost for run #{run_id}"):
        finish(db, run_id, "00000000-0000-0000-0000-000000000000")
    with raises_sqlstate("SW021", "SUCCEEDED or FAILED"):
        finish(db, run_id, token, "CANCELLED")
    finish(db, run_id, token)
    with raises_sqlstate("SW020", "the run is SUCCEEDED"):
        finish(db, run_id, token, "FAILED", "late")
    assert run_row(db, run_id)["status"] == "SUCCEEDED"


def test_expired_lease_becomes_interrupted_and_the_holder_cannot_report(db):
    make_worker(db)
    enqueue(db)
    run_id, token = claim(db)[:2]
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second'")
    reaped = db.execute("SELECT run_id, status, error_fingerprint FROM scrinalia.reap_expired_leases()").fetchall()
    assert reaped == [(run_id, "INTERRUPTED", "lease-expired")]
    with raises_sqlstate("SW020", "the run is INTERRUPTED"):
        finish(db, run_id, token)
    row = run_row(db, run_id)
    assert row["status"] == "INTERRUPTED" and "expired" in row["error"] and row["lease_token"] is None


def test_cancel_a_queued_or_running_run_only(db):
    make_worker(db)
    run_id = enqueue(db)[0]
    assert db.execute("SELECT status FROM scrinalia.cancel_run(%s, 'alice')", (run_id,)).fetchone()[0] == "CANCELLED"
    run2 = enqueue(db)[0]
    run2, token = claim(db)[:2]
    finish(db, run2, token)
    with raises_sqlstate("SW011", "it is SUCCEEDED"):
        db.execute("SELECT scrinalia.cancel_run(%s)", (run2,))
    with raises_sqlstate("SW011", "no such run"):
        db.execute("SELECT scrinalia.cancel_run(-1)")


@pytest.mark.parametrize(
    "instant, claimable_now",
    [
        ("infinity", None),
        ("20000-01-01 00:00+00", None),
        ("-infinity", True),
        ("4713-01-01 00:00+00 BC", True),
    ],
)
def test_next_claimable_at_is_always_a_wait_a_runner_can_compute(db, instant, claimable_now):
    """A hand-written not_before no wait can be computed from: a run never claimable is
    left out, one from before 1970 counts as claimable now; `- now()` never fails."""
    make_worker(db)
    enqueue(db)
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = %s::timestamptz", (instant,))
    at, wait = db.execute(
        "SELECT t::text, extract(epoch FROM t - now()) FROM scrinalia.next_claimable_at() t"
    ).fetchone()
    if claimable_now is None:
        assert at is None and wait is None
    else:
        assert at.startswith("1970-01-01") and wait < 0


def _running(db, workers, start, prefix="w"):
    """Claims a run of each of n new workers, then writes `start` by hand into the
    started_at of the first."""
    names = make_workers(db, workers, prefix)
    for w in names:
        enqueue(db, w)
    rows = db.execute("SELECT run_id, lease_token FROM scrinalia.claim_runs('r1', '5 minutes', NULL, 100)").fetchall()
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = %s::timestamptz WHERE run_id = %s", (start, rows[0][0])
    )
    return rows


@pytest.mark.parametrize("start", ["-infinity", "infinity"])
def test_an_infinite_start_fails_neither_the_batch_finish_nor_the_reaper(db, start):
    """now() - started_at fails for a hand-written infinite start: it failed
    finish_runs for every run of its batch, and reap_expired_leases(), the first call
    of every scheduler pass, so nothing was ticked at all. Its duration is NULL now."""
    rows = _running(db, 3, start)
    db.execute(
        "SELECT count(*) FROM scrinalia.finish_runs(%s, %s, %s, %s, %s)",
        ([r[0] for r in rows], [r[1] for r in rows], ["SUCCEEDED"] * 3, [None] * 3, [None] * 3),
    )
    got = dict(
        db.execute(
            "SELECT run_id, status::text || coalesce(' ' || duration::text, '')"
            " FROM scrinalia.archive_worker_runs WHERE run_id = ANY(%s)",
            ([r[0] for r in rows],),
        )
    )
    assert got[rows[0][0]] == "SUCCEEDED"  # and no duration
    assert [got[r[0]].split()[0] for r in rows] == ["SUCCEEDED"] * 3
    rows = _running(db, 2, start, "x")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second'"
        " WHERE status = 'RUNNING'"
    )
    reaped = db.execute("SELECT run_id FROM scrinalia.reap_expired_leases()").fetchall()
    assert sorted(r[0] for r in reaped) == sorted(r[0] for r in rows)


@pytest.mark.parametrize("instant", ["-infinity", "4713-01-01 00:00+00 BC", "infinity", "20000-01-01 00:00+00"])
def test_the_watchers_read_any_hand_written_instant(db, instant):
    """next_wakeup(), the alerts, the metrics and the health check, with an instant no
    daemon writes in every column they read: each answers, none raises."""
    rows = _running(db, 2, instant)
    make_workers(db, 1, "q")
    enqueue(db, "q00000")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET not_before = %s::timestamptz WHERE worker_name = 'q00000'", (instant,)
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = %s::timestamptz WHERE run_id = %s",
        (instant, rows[1][0]),
    )
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at,"
        " arm_error, arm_retry_at) VALUES ('q00000', '* * * * *', 'UTC', %s, 'x', %s)",
        (instant, instant),
    )
    db.execute("UPDATE scrinalia.scheduler_state SET heartbeat_at = %s::timestamptz", (instant,))
    wait = db.execute("SELECT extract(epoch FROM w - now()) FROM scrinalia.next_wakeup() w").fetchone()[0]
    assert wait is not None and wait < 3600  # the other lease (5 minutes) at the latest
    # counted server-side: this test's own connection is a plain one, not db.connect()'s
    for call in ("current_alerts()", "worker_metrics()", "scheduler_health()", "scheduler_metrics()"):
        assert db.execute(f"SELECT count(*) FROM scrinalia.{call}").fetchone()[0] >= 1, call


@pytest.mark.parametrize("instant", ["infinity", "2999-01-01 00:00+00"])
def test_a_heartbeat_from_the_future_is_no_sign_of_life(db, instant):
    """A hand-written future heartbeat_at would keep a frozen lock holder from ever
    being stale (never evicted: nothing ticks). It counts for nothing: the holder's
    session start is its last sign of life."""
    db.execute(
        "UPDATE scrinalia.scheduler_state SET heartbeat_pid = pg_backend_pid(), heartbeat_at = %s::timestamptz",
        (instant,),
    )
    seen, start = db.execute(
        "SELECT scrinalia.holder_last_seen(pg_backend_pid()) <= now(), backend_start"
        " = scrinalia.holder_last_seen(pg_backend_pid()) FROM pg_stat_activity"
        " WHERE pid = pg_backend_pid()"
    ).fetchone()
    assert seen and start
    # the live holder's next heartbeat replaces it
    db.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")
    try:
        assert db.execute("SELECT scrinalia.scheduler_heartbeat('t', NULL)").fetchone()[0]
        assert db.execute("SELECT heartbeat_at <= now() FROM scrinalia.scheduler_state").fetchone()[0]
    finally:
        db.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
    db.execute("UPDATE scrinalia.scheduler_state SET heartbeat_at = '2026-01-01 00:00+00'")  # a past one counts
    assert db.execute("SELECT scrinalia.holder_last_seen(pg_backend_pid()) = '2026-01-01 00:00+00'").fetchone()[0]


@pytest.mark.parametrize("instant", ["-infinity", "infinity", "4713-01-01 00:00+00 BC", "20000-01-01 00:00+00"])
def test_the_lateness_gauge_reads_a_hand_written_created_at(db, instant):
    """worker_metrics()'s last lateness is created_at - scheduled_for of the schedule's
    last run, and the queue wait counts from created_at; with a created_at no daemon
    writes, +infinity, they raised, and the metrics exporter's whole scrape with them.
    The lateness is unknown (NULL) then, the wait bounded, and the other workers answer."""
    make_workers(db, 2, "m")
    for w in ("m00000", "m00001"):
        db.execute(
            "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
            " VALUES (%s, %s, 'UTC', now() - interval '1 minute')",
            (w, YEARLY),
        )
    nexts = [next_occurrence(db, "m00000", "0 seconds")] * 2  # (both yearly, in UTC)
    db.execute("SELECT count(*) FROM scrinalia.tick(%s, %s, 'test')", (["m00000", "m00001"], nexts))
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = %s::timestamptz WHERE worker_name = 'm00000'", (instant,)
    )
    got = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT worker_name, last_lateness_seconds, oldest_claimable_wait_seconds FROM scrinalia.worker_metrics()"
            " WHERE worker_name LIKE 'm%'"
        ).fetchall()
    }
    assert got["m00000"][0] is None
    assert got["m00001"][0] is not None and 0 <= got["m00001"][0] < 3600
    # the run waits in the queue: counted from 1970 at the earliest, from now() at the latest
    assert 0 <= got["m00000"][1] <= db.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0]
