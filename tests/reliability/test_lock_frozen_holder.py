"""A holder frozen (SIGSTOP) just before a due instant, on the least-privilege install
(the schema's owner is the database owner, neither superuser nor in pg_signal_backend,
so no standby can end a session), both schedulers under the scheduler group's login
with the default flags: the period's runs are visible, and the standby holds the lock,
within FROZEN_COST of the instant. Frozen while it waits for the instant (its prepared
tick not sent), or while its prepared tick waits in the server for the instant. Resumed,
it stands by, ticks nothing, nothing is enqueued twice, and every line either process
wrote on stdout or stderr is JSON."""

from __future__ import annotations

import json
import os
import signal
import time

import psycopg
import pytest

from helpers import YEARLY, make_workers
from scrinalia_workers.testkit.waiting import wait_for
from test_lock_least_privilege import _as, lp_dsn  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

# What a frozen holder may cost a period: the standby holds the lock, and the period's
# runs are committed, within this of the due instant.
FROZEN_COST = 10.0
# How far ahead the due instant is set: within --max-sleep, so the holder prepares it.
AHEAD = 3.0
# How long before its instant the holder is frozen while it waits (its prepared tick,
# sent about 0.25 s ahead, not sent yet).
BEFORE = 0.8


def _superuser(admin_dsn: str, dsn: str) -> psycopg.Connection:
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    return psycopg.connect(psycopg.conninfo.make_conninfo(admin_dsn, dbname=db), autocommit=True)


def _prepared_tick_in_server(su: psycopg.Connection, pid: int | None = None) -> bool:
    return bool(
        su.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'scrinalia-scheduler'"
            " AND state = 'active' AND query LIKE '%%tick_due_at%%' AND (%s::int IS NULL OR pid = %s::int)",
            (pid, pid),
        ).fetchone()
    )


def _not_json(p) -> list[str]:
    """The lines the process wrote (stdout and stderr) that are not a JSON object each."""
    bad = []
    for line in p.raw:
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            bad.append(line)
    return bad


def _armed(owner: psycopg.Connection) -> bool:
    return owner.execute(
        "SELECT bool_and(next_run_at > now() + interval '1 day') FROM scrinalia.archive_worker_schedules"
    ).fetchone()[0]


@pytest.mark.parametrize("moment", ["waiting", "in-prepared-tick"])
def test_a_frozen_holder_costs_a_period_at_most_10_s_without_the_right_to_end_sessions(
    lp_dsn,  # noqa: F811
    admin_dsn,
    role_logins,
    procs,
    moment,
):
    dsn, _ = lp_dsn
    sched = _as(dsn, role_logins["scheduler"])
    su = _superuser(admin_dsn, dsn)
    owner = psycopg.connect(dsn, autocommit=True)
    assert owner.execute(
        "SELECT NOT rolsuper AND NOT pg_has_role(current_user, 'pg_signal_backend', 'MEMBER')"
        " FROM pg_roles WHERE rolname = current_user"
    ).fetchone()[0]
    workers = make_workers(owner, 3, "fz")
    owner.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT w, %s, 'UTC' FROM unnest(%s::text[]) w",
        (YEARLY, workers),
    )
    a = procs.scheduler(sched, "--name", "a", lines="both")  # the default flags
    a.wait_event("lock acquired")
    b = procs.scheduler(sched, "--name", "b", lines="both")
    b.wait_event("standby")
    wait_for(lambda: _armed(owner), what="the schedules armed")

    # due AHEAD seconds from now (not an occurrence of the cron: set by hand, as a
    # client's put_schedule of a schedule due soon would)
    due = owner.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + make_interval(secs => %s)"
        " RETURNING next_run_at",
        (AHEAD,),
    ).fetchone()[0]
    due_mono = time.monotonic() + AHEAD
    owner.execute("NOTIFY scrinalia_scheduler")
    taken = b.mark()
    if moment == "waiting":
        time.sleep(max(0.0, due_mono - BEFORE - time.monotonic()))  # an instant, not a condition
        os.kill(a.pid, signal.SIGSTOP)
        assert not _prepared_tick_in_server(su), "the prepared tick was sent before the freeze"
    else:
        wait_for(lambda: _prepared_tick_in_server(su), timeout=AHEAD + 1, interval=0.005, what="the prepared tick sent")
        os.kill(a.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    assert frozen_at < due_mono, "frozen after the instant"

    def visible() -> bool:
        return owner.execute(
            "SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name = ANY(%s)", (workers,)
        ).fetchone()[0] == len(workers)

    wait_for(visible, timeout=AHEAD + FROZEN_COST + 5, interval=0.05, what="the period's runs visible")
    visible_after = time.monotonic() - due_mono
    took = b.wait_event("lock acquired", since=taken, timeout=FROZEN_COST + 5)["_mono"] - due_mono
    print(
        f"\nRELIABILITY frozen holder ({moment}, default flags, no right to end sessions):"
        f" the period visible {visible_after:.2f} s and the standby holding the lock {took:.2f} s after the due"
        f" instant (frozen {due_mono - frozen_at:.2f} s before it)"
    )
    assert visible_after <= FROZEN_COST, visible_after
    assert took <= FROZEN_COST, took
    assert b.count("stale holder evicted") == 0  # nothing could be ended: the lock session ended itself

    resumed = a.mark()
    os.kill(a.pid, signal.SIGCONT)
    a.wait_event("lock lost", since=resumed)
    a.wait_event("standby", since=resumed)
    # the resumed one enqueued nothing more, and the new holder keeps the lock
    rows = owner.execute(
        "SELECT worker_name, count(*), min(scheduled_for) = max(scheduled_for) AND min(scheduled_for) = %s"
        " FROM scrinalia.archive_worker_runs GROUP BY worker_name ORDER BY worker_name",
        (due,),
    ).fetchall()
    assert rows == [(w, 1, True) for w in workers], rows
    assert not a.has("lock acquired", after=a.events[resumed]["_mono"])
    assert not b.has("lock lost")
    assert [a.stop(), b.stop()] == [0, 0]
    # every line either wrote is JSON (psycopg's own warnings included)
    assert _not_json(a) == [] and _not_json(b) == []
    owner.close()
    su.close()


def test_every_line_is_json_when_the_sessions_are_ended_during_the_prepared_tick(
    lp_dsn,  # noqa: F811
    admin_dsn,
    role_logins,
    procs,
):
    """The connection lost under the prepared tick's pipeline (the server ends both
    sessions while it waits for its instant): the scheduler says so in JSON lines only,
    on stdout and stderr, and takes the lock again."""
    dsn, _ = lp_dsn
    su = _superuser(admin_dsn, dsn)
    owner = psycopg.connect(dsn, autocommit=True)
    workers = make_workers(owner, 2, "cl")
    owner.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT w, %s, 'UTC' FROM unnest(%s::text[]) w",
        (YEARLY, workers),
    )
    a = procs.scheduler(_as(dsn, role_logins["scheduler"]), "--name", "a", lines="both")
    a.wait_event("lock acquired")
    wait_for(lambda: _armed(owner), what="the schedules armed")
    owner.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + make_interval(secs => %s)", (AHEAD,)
    )
    owner.execute("NOTIFY scrinalia_scheduler")
    wait_for(lambda: _prepared_tick_in_server(su), timeout=AHEAD + 1, interval=0.005, what="the prepared tick sent")
    lost = a.mark()
    su.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'scrinalia-scheduler%%'"
    )
    a.wait_event("lock lost", since=lost)
    a.wait_event("lock acquired", since=lost, timeout=15)
    assert a.stop() == 0
    assert _not_json(a) == []
    assert a.raw, "the scheduler wrote nothing"
    owner.close()
    su.close()


# Schedules of distinct crons due at once: the holder's chunk computes their next
# occurrences inside its tick transaction long enough for the test to freeze it there.
IN_CHUNK = 6000


def test_a_holder_frozen_inside_a_tick_transaction_holds_its_rows_at_most_10_s(
    lp_dsn,  # noqa: F811
    admin_dsn,
    role_logins,
    procs,
):
    """Frozen between a chunk's due query and its commit (the chunk's cron work, inside
    the transaction that row-locks the due schedules): the server ends the frozen work
    session, and the standby ticks those schedules, within FROZEN_COST of the freeze."""
    dsn, _ = lp_dsn
    sched = _as(dsn, role_logins["scheduler"])
    su = _superuser(admin_dsn, dsn)
    owner = psycopg.connect(dsn, autocommit=True)
    workers = make_workers(owner, IN_CHUNK, "ch")
    crons = [f"{i % 60} {i // 60 % 24} {i // 1440 % 28 + 1} {i // 40320 % 12 + 1} *" for i in range(IN_CHUNK)]
    assert len(set(crons)) == IN_CHUNK
    owner.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT w, c, 'UTC' FROM unnest(%s::text[], %s::text[]) AS x(w, c)",
        (workers, crons),
    )
    a = procs.scheduler(sched, "--name", "a", lines="both")
    a.wait_event("lock acquired")
    b = procs.scheduler(sched, "--name", "b", lines="both")
    b.wait_event("standby")
    wait_for(
        lambda: owner.execute(
            "SELECT bool_and(next_run_at > now()) FROM scrinalia.archive_worker_schedules"
        ).fetchone()[0],
        timeout=30,
        what="the schedules armed",
    )
    work_pid = su.execute("SELECT heartbeat_work_pid FROM scrinalia.scheduler_state").fetchone()[0]

    def computing_in_chunk() -> bool:
        return bool(
            su.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'idle in transaction'"
                " AND query LIKE '%%due_schedules%%'",
                (work_pid,),
            ).fetchone()
        )

    taken = b.mark()
    # due now: not an instant the holder prepared, so its ordinary pass ticks them in a chunk
    owner.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now()")
    owner.execute("NOTIFY scrinalia_scheduler")
    wait_for(computing_in_chunk, timeout=10, interval=0.002, what="the chunk's cron work in its transaction")
    os.kill(a.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    assert computing_in_chunk(), "frozen outside the chunk's transaction"

    def runs() -> int:
        return owner.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0]

    assert runs() == 0
    wait_for(lambda: runs() == IN_CHUNK, timeout=FROZEN_COST + 10, interval=0.05, what="the chunk's runs visible")
    visible = time.monotonic() - frozen_at
    took = b.wait_event("lock acquired", since=taken, timeout=5)["_mono"] - frozen_at
    print(
        f"\nRELIABILITY frozen holder (inside a chunk of {IN_CHUNK} distinct crons, default flags, no right to"
        f" end sessions): the standby held the lock {took:.2f} s and the chunk's runs were visible {visible:.2f} s"
        " after the freeze"
    )
    assert visible <= FROZEN_COST, visible
    assert took <= FROZEN_COST, took
    resumed = a.mark()
    os.kill(a.pid, signal.SIGCONT)
    a.wait_event("lock lost", since=resumed)
    assert owner.execute("SELECT count(DISTINCT worker_name) = count(*) FROM scrinalia.archive_worker_runs").fetchone()[
        0
    ]
    assert [a.stop(), b.stop()] == [0, 0]
    assert _not_json(a) == [] and _not_json(b) == []
    owner.close()
    su.close()


# A healthy holder kept busy: a full chunk of distinct crons and part of another (their
# cron work inside each chunk's transaction, their tick statements long), twice: when
# it arms them, then when they all fall due. Without the keepalive thread it lost the
# lock three times.
BUSY = 25_000


def test_a_busy_holder_keeps_its_lock_through_long_chunks(lp_dsn, role_logins, procs):  # noqa: F811
    dsn, _ = lp_dsn
    owner = psycopg.connect(dsn, autocommit=True)
    workers = make_workers(owner, BUSY, "busy")
    crons = [f"{i % 60} {i // 60 % 24} {i // 1440 % 28 + 1} {i // 40320 % 12 + 1} *" for i in range(BUSY)]
    owner.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT w, c, 'UTC' FROM unnest(%s::text[], %s::text[]) AS x(w, c)",
        (workers, crons),
    )
    a = procs.scheduler(_as(dsn, role_logins["scheduler"]), "--name", "a", lines="both")
    a.wait_event("lock acquired")
    wait_for(
        lambda: (
            owner.execute(
                "SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at > now()"
            ).fetchone()[0]
            == BUSY
        ),
        timeout=120,
        interval=0.5,
        what="the schedules armed",
    )
    owner.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now()")
    owner.execute("NOTIFY scrinalia_scheduler")
    wait_for(
        lambda: owner.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == BUSY,
        timeout=120,
        interval=0.5,
        what="every run enqueued",
    )
    assert a.count("lock lost") == 0 and a.count("lock acquired") == 1
    assert a.count("pass error") == 0
    assert a.stop() == 0
    assert _not_json(a) == []
    owner.close()
