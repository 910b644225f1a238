"""A lease that ran out while the server was down is held one more lease from the
server's start (lease_held_until): the reaper does not beat the runner coming back
with its report, and that report lands. Tested by moving the lease's expiry against
pg_postmaster_start_time(), and with explicit instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from helpers import claim, finish, make_worker, raises_sqlstate, run_row

START = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def _enqueue_and_claim(db, lease: str) -> tuple[int, object]:
    make_worker(db)
    db.execute("SELECT scrinalia.enqueue('ocr', %s)", (Jsonb({}),))
    run_id, token = claim(db, lease=lease)[:2]
    return run_id, token


def _expire_before_start(db, run_id: int, before: str) -> None:
    """As if the lease was renewed before the server went down and ran out `before` its start."""
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = pg_postmaster_start_time() - %s::interval,"
        " heartbeat_at = pg_postmaster_start_time() - %s::interval - lease_duration,"
        " started_at = pg_postmaster_start_time() - %s::interval - lease_duration"
        " WHERE run_id = %s",
        (before, before, before, run_id),
    )


@pytest.mark.parametrize(
    "expires, held",
    [
        (START - timedelta(seconds=0.1), START + LEASE),  # ran out just before the server was back
        (START, START + LEASE),
        (START - LEASE + timedelta(seconds=1), START + LEASE),
        (START - LEASE, START - LEASE),  # down longer than a lease before: today's rule
        (START - timedelta(hours=1), START - timedelta(hours=1)),
        (START + timedelta(seconds=1), START + timedelta(seconds=1)),  # ran out while up
    ],
)
def test_lease_held_until_explicit_instants(db, expires, held):
    renewed = expires - LEASE
    got = db.execute("SELECT scrinalia.lease_held_until(%s, %s, %s, %s)", (expires, LEASE, renewed, START)).fetchone()[
        0
    ]
    assert got == held


def test_a_lease_renewed_after_the_start_ends_at_its_expiry(db):
    expires = START - timedelta(seconds=1)
    got = db.execute(
        "SELECT scrinalia.lease_held_until(%s, %s, %s, %s)",
        (expires, LEASE, START + timedelta(seconds=5), START),
    ).fetchone()[0]
    assert got == expires


def test_a_lease_that_ran_out_while_the_server_was_down_is_not_reaped_and_its_report_lands(db):
    run_id, token = _enqueue_and_claim(db, "1 day")
    _expire_before_start(db, run_id, "1 second")
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0
    # the returning runner's heartbeat holds it again, from now
    expires = db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token)).fetchone()[0]
    assert db.execute("SELECT %s::timestamptz > now() + interval '23 hours'", (expires,)).fetchone()[0]
    _expire_before_start(db, run_id, "1 second")
    assert finish(db, run_id, token)[0] == "SUCCEEDED"
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 1


def test_the_batch_report_within_the_grace_lands(db):
    run_id, token = _enqueue_and_claim(db, "1 day")
    _expire_before_start(db, run_id, "1 hour")
    rows = db.execute(
        "SELECT run_id, status::text, lost_reason FROM scrinalia.finish_runs(%s, %s, %s)",
        ([run_id], [token], ["SUCCEEDED"]),
    ).fetchall()
    assert rows == [(run_id, "SUCCEEDED", None)]


def test_a_lease_that_ran_out_longer_than_a_lease_before_the_start_is_reaped(db):
    run_id, token = _enqueue_and_claim(db, "1 minute")
    _expire_before_start(db, run_id, "2 minutes")
    with raises_sqlstate("SW020", "the lease expired"):
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    reaped = db.execute("SELECT run_id, status::text FROM scrinalia.reap_expired_leases()").fetchall()
    assert reaped == [(run_id, "INTERRUPTED")]
    assert run_row(db, run_id)["error_fingerprint"] == "lease-expired"


def test_a_lease_that_ran_out_after_the_start_is_reaped(db):
    run_id, token = _enqueue_and_claim(db, "1 day")
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 millisecond'")
    assert db.execute("SELECT pg_postmaster_start_time() < now() - interval '1 millisecond'").fetchone()[0]
    with raises_sqlstate("SW020", "lost"):
        finish(db, run_id, token)
    assert [r[0] for r in db.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")] == [run_id]
