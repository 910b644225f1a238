"""A runner's stall in the database (sql/38_runner_stalls.sql): a runner login says that
every handler thread of its runner is held by a run told to stop, then that it is over
or that the runner exits for it; current_alerts() says RUNNER_STUCK with the runs, their
workers and what to do, the exporter's gauges count it without naming the runner, and
no login can grow the table without bound or speak for another login's runner."""

from __future__ import annotations

import psycopg
import pytest

from helpers import make_worker, raises_sqlstate, scheduled_run

REPORT = "SELECT scrinalia.report_runner_stuck(%s, %s, %s, %s::interval)"


def _alerts(db) -> list[tuple]:
    return db.execute(
        "SELECT run_ids, message FROM scrinalia.current_alerts() WHERE kind = 'RUNNER_STUCK' ORDER BY since"
    ).fetchall()


def _metrics(conn) -> tuple:
    return tuple(conn.execute("SELECT * FROM scrinalia.runner_stall_metrics()").fetchone())


@pytest.fixture
def second_runner(db, db_dsn, template_db):
    """Another login of the runner group (a second deployment's runners)."""
    if not db.execute("SELECT 1 FROM pg_roles WHERE rolname = 'sw_login_runner_b'").fetchone():
        db.execute('CREATE ROLE "sw_login_runner_b" LOGIN IN ROLE scrinalia_runner')
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(db_dsn, user="sw_login_runner_b"), autocommit=True)
    yield conn
    conn.close()


def test_a_stall_is_an_alert_until_it_is_over(db, connect_as):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    runner = connect_as("runner")
    runner.execute(REPORT, ("host-a:41", [run_id], 1, "30 seconds"))
    [(run_ids, message)] = _alerts(db)
    assert run_ids == [run_id]
    assert "runner host-a:41 (login sw_login_runner): all 1 of its handler threads" in message
    assert f"({run_id}, of hang: cancelled" in message and "it exits at " in message
    assert "context.check()" in message
    assert _metrics(connect_as("monitor")) == (1, 1, 0)
    runner.execute("SELECT scrinalia.clear_runner_stuck('host-a:41')")
    assert _alerts(db) == [] and _metrics(db) == (0, 0, 0)


def test_a_runner_that_exits_stuck_stays_an_alert_for_the_window(db, connect_as):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    runner = connect_as("runner")
    runner.execute(REPORT, ("host-a:42", [run_id, run_id, None], 2, "5 seconds"))  # (duplicates, NULLs go)
    runner.execute("SELECT scrinalia.report_runner_stuck_exit('host-a:42')")
    [(run_ids, message)] = _alerts(db)
    assert run_ids == [run_id] and "runner host-a:42 (login sw_login_runner) exited at " in message
    assert "is its supervisor restarting it" in message
    assert _metrics(db) == (0, 0, 1)
    # an hour on (the window, moved as data), the alert is gone, and the next report prunes the row
    db.execute(
        "UPDATE scrinalia.runner_stalls"
        " SET reported_at = now() - scrinalia.runner_stall_alert_window() - interval '1 second'"
    )
    assert _alerts(db) == [] and _metrics(db) == (0, 0, 0)
    runner.execute(REPORT, ("host-a:43", [run_id], 1, "5 seconds"))
    assert [r[0] for r in db.execute("SELECT runner FROM scrinalia.runner_stalls")] == ["host-a:43"]


def test_a_login_cannot_speak_for_another_logins_runner(db, connect_as, second_runner):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    connect_as("runner").execute(REPORT, ("host-a:44", [run_id], 1, "5 seconds"))
    for statement, args in (
        ("SELECT scrinalia.clear_runner_stuck(%s)", ("host-a:44",)),
        ("SELECT scrinalia.report_runner_stuck_exit(%s)", ("host-a:44",)),
        (REPORT, ("host-a:44", [run_id], 1, "5 seconds")),
    ):
        with raises_sqlstate("SW022", "host-a:44's stall was reported by login sw_login_runner"):
            second_runner.execute(statement, args)
    assert len(_alerts(db)) == 1 and " exited at " not in _alerts(db)[0][1]
    db.execute("SELECT scrinalia.clear_runner_stuck('host-a:44')")  # the owner may
    assert _alerts(db) == []


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("bad id!", [1], 1, "5 seconds"), "invalid runner id"),
        ((None, [1], 1, "5 seconds"), "invalid runner id"),
        (("r:1", [1], 0, "5 seconds"), "1 to 1024 threads, not 0"),
        (("r:1", [1], 5000, "5 seconds"), "1 to 1024 threads, not 5000"),
        (("r:1", [], 1, "5 seconds"), "1 to 1 run ids (one per thread), not 0"),
        (("r:1", [1, 2, 3], 2, "5 seconds"), "1 to 2 run ids (one per thread), not 3"),
        (("r:1", [1], 1, "-1 second"), "a grace of 0 to 1 day"),
        (("r:1", [1], 1, "2 days"), "a grace of 0 to 1 day"),
    ],
)
def test_bad_input_is_refused_with_what_is_wrong(db, connect_as, args, fragment):
    with raises_sqlstate("SW022", fragment):
        connect_as("runner").execute(REPORT, args)
    assert db.execute("SELECT count(*) FROM scrinalia.runner_stalls").fetchone()[0] == 0


def test_the_table_is_bounded(db, connect_as):
    runner = connect_as("runner")
    cap = db.execute("SELECT scrinalia.max_runner_stalls()").fetchone()[0]
    db.execute(
        "INSERT INTO scrinalia.runner_stalls (runner, login, run_ids, threads, stuck_since, exits_at, reported_at)"
        " SELECT 'old:' || i, 'sw_login_runner', ARRAY[i]::bigint[], 1, now(), now(), now() - interval '1 minute'"
        " FROM generate_series(1, %s) i",
        (cap,),
    )
    runner.execute(REPORT, ("new:1", [7], 1, "5 seconds"))
    assert db.execute("SELECT count(*) FROM scrinalia.runner_stalls").fetchone()[0] == cap
    assert db.execute("SELECT 1 FROM scrinalia.runner_stalls WHERE runner = 'new:1'").fetchone()


def test_who_may_call_what(connect_as):
    for group in ("reader", "operator", "scheduler", "monitor"):
        with raises_sqlstate("42501"):
            connect_as(group).execute(REPORT, ("r:1", [1], 1, "5 seconds"))
    with raises_sqlstate("42501"):
        connect_as("monitor").execute("SELECT * FROM scrinalia.runner_stalls()")  # runner ids: not the monitor's
    assert _metrics(connect_as("monitor")) == (0, 0, 0)
    assert connect_as("reader").execute("SELECT count(*) FROM scrinalia.runner_stalls()").fetchone()[0] == 0
