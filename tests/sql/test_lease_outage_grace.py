"""A lease renewed before the server started, that ran out while it was down or runs
out in the lease after it came back, is held one lease from the server's start
(lease_held_until): the reaper does not beat the runner reconnecting with backoff, and
its heartbeat or report lands. Tested by moving the lease's instants against
pg_postmaster_start_time(), and with explicit instants at every phase of the
heartbeat (a runner heartbeats every lease/3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from helpers import claim, finish, make_worker, raises_sqlstate, run_row

START = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def _enqueue_and_claim(db, lease: str) -> tuple[int, object]:
    make_worker(db)
    # the leases here outlive the default maximum run time, which these tests are not about
    db.execute("SELECT scrinalia.set_max_run_time('ocr', interval '7 days')")
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
        # runs out after the server came back, the runner not reconnected yet: held too
        (START + timedelta(seconds=1), START + LEASE),
        (START + LEASE - timedelta(seconds=0.1), START + LEASE),
        (START + LEASE, START + LEASE),  # renewed at the start: by this server
        (START + LEASE + timedelta(seconds=1), START + LEASE + timedelta(seconds=1)),
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


@pytest.mark.parametrize("outage", [timedelta(seconds=1), LEASE / 2, LEASE - timedelta(seconds=0.1)])
@pytest.mark.parametrize(
    "since_renewal",
    [LEASE / 3 - timedelta(seconds=0.1), timedelta(seconds=0.1), LEASE / 6],
    ids=["just-before-a-heartbeat", "just-after-a-heartbeat", "between"],
)
def test_an_outage_shorter_than_the_lease_holds_it_a_lease_after_the_start_at_any_phase(db, outage, since_renewal):
    """The server goes down `since_renewal` after the last heartbeat (or the claim) and
    is back `outage` later: the lease is held until a whole lease after the start,
    whatever the runner's backoff needs within it, and never shortened."""
    renewed = START - outage - since_renewal
    expires = renewed + LEASE
    got = db.execute("SELECT scrinalia.lease_held_until(%s, %s, %s, %s)", (expires, LEASE, renewed, START)).fetchone()[
        0
    ]
    assert got == START + LEASE >= expires


def _expire_after_start(db, run_id: int) -> None:
    """As if the lease was renewed before the server went down and ran out after it
    came back, before now: the runner has not reconnected yet."""
    db.execute(
        "UPDATE scrinalia.archive_worker_runs r"
        "   SET lease_expires_at = s.start + (now() - s.start) / 2,"
        "       heartbeat_at = s.start + (now() - s.start) / 2 - lease_duration,"
        "       started_at = s.start + (now() - s.start) / 2 - lease_duration"
        "  FROM (SELECT pg_postmaster_start_time() AS start) s WHERE run_id = %s",
        (run_id,),
    )
    assert db.execute(
        "SELECT pg_postmaster_start_time() < lease_expires_at AND lease_expires_at < now()"
        " AND heartbeat_at < pg_postmaster_start_time() FROM scrinalia.archive_worker_runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()[0]


@pytest.mark.parametrize("comes_back_with", ["heartbeat", "report"])
def test_a_lease_running_out_after_the_restart_waits_for_the_runner(db, comes_back_with):
    run_id, token = _enqueue_and_claim(db, "1 day")
    _expire_after_start(db, run_id)
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0
    if comes_back_with == "heartbeat":
        expires = db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token)).fetchone()[0]
        assert db.execute("SELECT %s::timestamptz > now() + interval '23 hours'", (expires,)).fetchone()[0]
        _expire_after_start(db, run_id)
    assert finish(db, run_id, token)[0] == "SUCCEEDED"
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 1


def test_a_runner_that_never_comes_back_is_reaped_a_lease_after_the_restart(db):
    run_id, token = _enqueue_and_claim(db, "1 second")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = pg_postmaster_start_time() + interval '0.5 s',"
        " heartbeat_at = pg_postmaster_start_time() - interval '0.5 s',"
        " started_at = pg_postmaster_start_time() - interval '0.5 s' WHERE run_id = %s",
        (run_id,),
    )
    assert db.execute("SELECT now() > pg_postmaster_start_time() + interval '1 second'").fetchone()[0]
    reaped = db.execute("SELECT run_id, status::text FROM scrinalia.reap_expired_leases()").fetchall()
    assert reaped == [(run_id, "INTERRUPTED")]


def test_the_scheduler_wakes_when_a_held_lease_ends_not_at_its_expiry(db):
    """A lease renewed before the server started and held after it: next_wakeup() must
    not answer its expiry (already past), or the scheduler passes at every wake-up
    until the hold ends, reaping nothing (an earlier release's, with no minimum sleep,
    would spin)."""
    run_id, _ = _enqueue_and_claim(db, "1 day")
    _expire_before_start(db, run_id, "1 second")
    wake, now, start = db.execute("SELECT scrinalia.next_wakeup(), now(), pg_postmaster_start_time()").fetchone()
    assert wake > now
    assert wake == start + timedelta(days=1)
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0
