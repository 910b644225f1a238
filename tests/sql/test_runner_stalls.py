"""A runner's stall in the database (sql/38_runner_stalls.sql): a runner login says that
every handler thread of its runner is held by a run told to stop, then that it is over
or that the runner exits for it; current_alerts() says RUNNER_STUCK with the runs, their
workers and what to do, the exporter's gauges count it without naming the runner. Each
login's runners are apart (none squats, clears or evicts another login's), a stall names
only runs its runner id claimed, each login's rows are bounded, and a runner that went
without a word (killed, its host lost) stops counting as stuck once its exit time passed."""

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


def _claimed(db, worker: str, runner: str) -> int:
    """A scheduled run of `worker`, claimed by runner id `runner`."""
    make_worker(db, worker)
    run_id = scheduled_run(db, worker)
    got = db.execute(
        "SELECT run_id FROM scrinalia.claim_runs(%s, '1 minute', ARRAY[%s], 1)", (runner, worker)
    ).fetchone()[0]
    assert got == run_id
    return run_id


@pytest.fixture
def second_runner(db, db_dsn, template_db):
    """Another login of the runner group (a second deployment's runners)."""
    if not db.execute("SELECT 1 FROM pg_roles WHERE rolname = 'sw_login_runner_b'").fetchone():
        db.execute('CREATE ROLE "sw_login_runner_b" LOGIN IN ROLE scrinalia_runner')
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(db_dsn, user="sw_login_runner_b"), autocommit=True)
    yield conn
    conn.close()


def test_a_stall_is_an_alert_until_it_is_over(db, connect_as):
    run_id = _claimed(db, "hang", "host-a:41")
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
    run_id = _claimed(db, "hang", "host-a:42")
    runner = connect_as("runner")
    runner.execute(REPORT, ("host-a:42", [run_id, run_id, None], 2, "5 seconds"))  # (duplicates, NULLs go)
    runner.execute("SELECT scrinalia.report_runner_stuck_exit('host-a:42')")
    [(run_ids, message)] = _alerts(db)
    assert run_ids == [run_id] and "runner host-a:42 (login sw_login_runner) exited at " in message
    assert "is its supervisor restarting it" in message
    assert _metrics(db) == (0, 0, 1)
    # an hour on (the window, moved as data), the alert is gone, and the login's next report prunes the row
    db.execute(
        "UPDATE scrinalia.runner_stalls"
        " SET reported_at = now() - scrinalia.runner_stall_alert_window() - interval '1 second',"
        " exits_at = now() - scrinalia.runner_stall_alert_window() - interval '1 second'"
    )
    assert _alerts(db) == [] and _metrics(db) == (0, 0, 0)
    other = _claimed(db, "hang2", "host-a:43")
    runner.execute(REPORT, ("host-a:43", [other], 1, "5 seconds"))
    assert [r[0] for r in db.execute("SELECT runner FROM scrinalia.runner_stalls")] == ["host-a:43"]


def test_a_runner_that_went_without_a_word_is_no_longer_stuck(db, connect_as):
    """Killed (kill -9, the OOM killer, its host lost) after it said it was stuck: once its
    exit time passed by the slack, it is gone, still an alert, no longer stuck now."""
    run_id = _claimed(db, "hang", "host-a:45")
    connect_as("runner").execute(REPORT, ("host-a:45", [run_id], 4, "30 seconds"))
    assert _metrics(db) == (1, 4, 0)
    db.execute(
        "UPDATE scrinalia.runner_stalls SET exits_at = now() - scrinalia.runner_stall_exit_slack() - interval '1s'"
    )
    assert _metrics(db) == (0, 0, 1)
    [(run_ids, message)] = _alerts(db)
    assert run_ids == [run_id] and "has not said a word since: it was killed" in message
    # a long grace: the window runs from the exit time, not from the report
    db.execute(
        "UPDATE scrinalia.runner_stalls SET reported_at = now() - interval '2 hours',"
        " exits_at = now() + interval '10 minutes'"
    )
    assert _metrics(db) == (1, 4, 0)


def test_logins_are_apart(db, connect_as, second_runner):
    run_id = _claimed(db, "hang", "host-a:44")
    mine = connect_as("runner")
    mine.execute(REPORT, ("host-a:44", [run_id], 1, "5 seconds"))
    # another login's clear and exit of the same runner id touch only its own rows
    second_runner.execute("SELECT scrinalia.clear_runner_stuck('host-a:44')")
    second_runner.execute("SELECT scrinalia.report_runner_stuck_exit('host-a:44')")
    assert len(_alerts(db)) == 1 and " exited at " not in _alerts(db)[0][1]
    # nor can it crowd them out: its own rows are bounded apart
    cap = db.execute("SELECT scrinalia.max_runner_stalls()").fetchone()[0]
    db.execute(
        "INSERT INTO scrinalia.runner_stalls (login, runner, run_ids, threads, stuck_since, exits_at, reported_at)"
        " SELECT 'sw_login_runner_b', 'flood:' || i, ARRAY[%s]::bigint[], 1, now(), now() + interval '1 minute',"
        " now() - interval '1 minute' FROM generate_series(1, %s) i",
        (run_id, cap),
    )
    other = _claimed(db, "hang2", "flood:new")
    second_runner.execute(REPORT, ("flood:new", [other], 1, "5 seconds"))
    counts = dict(db.execute("SELECT login, count(*) FROM scrinalia.runner_stalls GROUP BY login").fetchall())
    assert counts == {"sw_login_runner_b": cap, "sw_login_runner": 1}
    assert db.execute("SELECT 1 FROM scrinalia.runner_stalls WHERE runner = 'flood:new'").fetchone()
    db.execute("SELECT scrinalia.clear_runner_stuck('host-a:44')")  # the owner may clear any login's
    assert db.execute("SELECT count(*) FROM scrinalia.runner_stalls WHERE runner = 'host-a:44'").fetchone()[0] == 0


def test_a_stall_names_only_runs_its_runner_claimed(db, connect_as):
    run_id = _claimed(db, "hang", "host-a:46")
    with raises_sqlstate("SW022", f"runner host-b:1 did not claim run(s) {run_id}"):
        connect_as("runner").execute(REPORT, ("host-b:1", [run_id], 1, "5 seconds"))
    with raises_sqlstate("SW022", "did not claim run(s) 999999"):
        connect_as("runner").execute(REPORT, ("host-a:46", [run_id, 999999], 2, "5 seconds"))
    assert db.execute("SELECT count(*) FROM scrinalia.runner_stalls").fetchone()[0] == 0


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


def test_who_may_call_what(connect_as):
    for group in ("reader", "operator", "scheduler", "monitor"):
        with raises_sqlstate("42501"):
            connect_as(group).execute(REPORT, ("r:1", [1], 1, "5 seconds"))
    with raises_sqlstate("42501"):
        connect_as("monitor").execute("SELECT * FROM scrinalia.runner_stalls()")  # runner ids: not the monitor's
    assert _metrics(connect_as("monitor")) == (0, 0, 0)
    assert connect_as("reader").execute("SELECT count(*) FROM scrinalia.runner_stalls()").fetchone()[0] == 0
