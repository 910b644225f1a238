"""Every policy number has one home, sql/05_policy.sql: the rule that applies it
refuses, cuts or counts exactly at the number its function gives."""

from __future__ import annotations

import psycopg
import pytest

from helpers import make_worker, make_workers, raises_sqlstate, run_row


def _one(db, sql, *args):
    return db.execute(sql, args).fetchone()[0]


def test_the_lease_bounds_are_min_lease_and_max_lease(db):
    lo, hi = db.execute("SELECT scrinalia.min_lease(), scrinalia.max_lease()").fetchone()
    for lease in (lo, hi):
        db.execute("SELECT scrinalia.check_runner('r', %s)", (lease,))
    for outside in ("min_lease() - interval '1 microsecond'", "max_lease() + interval '1 microsecond'"):
        with raises_sqlstate("SW022", "a lease is between 1 second and 1 day"):
            db.execute(f"SELECT scrinalia.check_runner('r', scrinalia.{outside})")


def test_a_runner_id_is_at_most_max_runner_id_length(db):
    n = _one(db, "SELECT scrinalia.max_runner_id_length()")
    db.execute("SELECT scrinalia.check_runner(%s, '1 minute')", ("r" * n,))
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT scrinalia.check_runner(%s, '1 minute')", ("r" * (n + 1),))
    assert refused.value.sqlstate == "SW022"
    assert refused.value.diag.message_hint == f"a runner id is 1 to {n} ASCII letters, digits or _ . : @ / -"
    for bad in ("", "runner one", "rünner", None):
        with raises_sqlstate("SW022", "invalid runner id"):
            db.execute("SELECT scrinalia.check_runner(%s, '1 minute')", (bad,))


def test_a_claim_batch_is_at_most_max_claim_batch(db):
    n = _one(db, "SELECT scrinalia.max_claim_batch()")
    assert db.execute("SELECT * FROM scrinalia.claim_runs('r', '1 minute', NULL, %s)", (n,)).fetchall() == []
    with raises_sqlstate("SW022", f"between 1 and {n}"):
        db.execute("SELECT * FROM scrinalia.claim_runs('r', '1 minute', NULL, %s)", (n + 1,))
    with raises_sqlstate("SW022", f"at most {n} runs a call, not {n + 1}"):
        db.execute("SELECT * FROM scrinalia.heartbeat_runs(%s, %s)", (list(range(1, n + 2)), [None] * (n + 1)))


def test_an_outcome_keeps_max_error_length_and_max_fingerprint_length(db):
    errors, prints = db.execute("SELECT scrinalia.max_error_length(), scrinalia.max_fingerprint_length()").fetchone()
    workers = make_workers(db, 2)
    for w in workers:
        db.execute("SELECT scrinalia.enqueue(%s)", (w,))
    (one, t1), (two, t2) = db.execute("SELECT run_id, lease_token FROM scrinalia.claim_runs('r', '1 minute', NULL, 2)")
    db.execute("SELECT scrinalia.finish(%s, %s, 'FAILED', %s, %s)", (one, t1, "e" * (errors + 5), "f" * (prints + 5)))
    db.execute(
        "SELECT * FROM scrinalia.finish_runs(%s, %s, '{FAILED}', %s, %s)",
        ([two], [t2], ["e" * errors], ["f" * prints]),
    )
    for run_id in (one, two):
        row = run_row(db, run_id)
        assert (row["error"], row["error_fingerprint"]) == ("e" * errors, "f" * prints)


def test_a_set_aside_schedule_keeps_max_arm_error_length(db):
    (w,) = make_workers(db, 1)
    db.execute("SELECT scrinalia.put_schedule(%s, '0 2 * * *', 'UTC')", (w,))
    n = _one(db, "SELECT scrinalia.max_arm_error_length()")
    kept = _one(db, "SELECT arm_error FROM scrinalia.set_schedules_aside(%s, %s)", [w], ["z" * (n + 1)])
    assert kept == "z" * n


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("scrinalia.retry_delay(1, 0) = scrinalia.retry_base_delay()", True),
        ("scrinalia.retry_delay(3, 0) = 4 * scrinalia.retry_base_delay()", True),
        ("scrinalia.retry_delay(40, 0) = scrinalia.retry_max_delay()", True),
        (
            "scrinalia.retry_delay(1, scrinalia.retry_jitter()) = (1 + scrinalia.retry_jitter()) * scrinalia.retry_base_delay()",
            True,
        ),
    ],
)
def test_retry_delay_is_made_of_its_numbers(db, sql, expected):
    assert _one(db, f"SELECT {sql}") is expected


def test_retry_delay_takes_a_jitter_within_retry_jitter(db):
    jitter = _one(db, "SELECT scrinalia.retry_jitter()")
    db.execute("SELECT scrinalia.retry_delay(1, %s), scrinalia.retry_delay(1, %s)", (jitter, -jitter))
    for outside in (jitter * 1.0001, -jitter * 1.0001, float("nan")):
        with raises_sqlstate("SW002", f"a jitter in [{-jitter}, {jitter}]"):
            db.execute("SELECT scrinalia.retry_delay(1, %s)", (outside,))


def test_retry_delay_and_its_numbers_are_for_every_group(db, connect_as):
    for group in ("reader", "operator", "runner", "scheduler"):
        c = connect_as(group)
        assert c.execute("SELECT scrinalia.retry_delay(2, 0) = 2 * scrinalia.retry_base_delay()").fetchone()[0]
        c.execute("SELECT scrinalia.retry_max_delay(), scrinalia.retry_jitter()")


def test_a_reaped_lease_is_alerted_for_reaped_alert_window(db):
    workers = make_workers(db, 2)
    for w in workers:
        db.execute("SELECT scrinalia.enqueue(%s)", (w,))
    ids = [r[0] for r in db.execute("SELECT run_id FROM scrinalia.claim_runs('r', '1 minute', NULL, 2)")]
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = ANY(%s)",
        (ids,),
    )
    assert len(db.execute("SELECT * FROM scrinalia.reap_expired_leases()").fetchall()) == 2
    # one reaped just inside the window, the other just outside it
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = now() - scrinalia.reaped_alert_window()"
        " + CASE WHEN run_id = %s THEN interval '1 second' ELSE interval '-1 second' END",
        (ids[0],),
    )
    alerted = db.execute("SELECT run_ids FROM scrinalia.current_alerts() WHERE kind = 'LEASE_REAPED'").fetchall()
    assert alerted == [([ids[0]],)]
    assert _one(db, "SELECT leases_reaped_last_hour FROM scrinalia.scheduler_metrics()") == 1


def test_the_limits_of_the_catalogue_the_cron_and_retention_are_their_policy_numbers(db):
    """Each limit acts exactly at its number in 05_policy.sql, and the shim's cron
    length agrees with SQL's."""
    from scrinalia_workers.cron import MAX_LENGTH

    most_cron, most_zone, most_bytes, youngest, biggest, fewest = db.execute(
        "SELECT scrinalia.max_cron_length(), scrinalia.max_timezone_length(), scrinalia.max_request_bytes(),"
        " scrinalia.min_prune_age(), scrinalia.max_prune_batch(), scrinalia.max_attempts()"
    ).fetchone()
    assert MAX_LENGTH == most_cron
    db.execute("SELECT scrinalia.validate_cron(%s)", ("*  " + " " * (most_cron - 11) + "* * * *",))
    with raises_sqlstate("SW003", f"longer than {most_cron} characters"):
        db.execute("SELECT scrinalia.validate_cron(%s)", ("* " * (most_cron // 2) + "* * * *",))
    with raises_sqlstate("SW004"):
        db.execute("SELECT scrinalia.validate_timezone(%s)", ("X" * (most_zone + 1),))
    make_worker(db)
    with raises_sqlstate("SW002", f"the limit is {most_bytes}"):
        db.execute(
            "SELECT scrinalia.enqueue('ocr', jsonb_build_object('options', jsonb_build_object("
            "'lang', repeat('x', %s))))",
            (most_bytes,),
        )
    with raises_sqlstate("SW002"):
        db.execute("SELECT scrinalia.prune_runs(%s - interval '1 second')", (youngest,))
    with raises_sqlstate("SW002", f"a batch of {fewest} to {biggest} runs"):
        db.execute("SELECT scrinalia.prune_runs(interval '30 days', %s)", (biggest + 1,))
