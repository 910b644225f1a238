"""0015_run_catch_up_column: the catch-up becomes a column of the run without changing
what any function returns. A statement an earlier release prepared on the server
against enqueue(), claim_next() and finish() (0.1.0's runner prepares its claim) runs
on with the same columns between the migration's transaction and the code's, and after
the code. The catch-ups 0010 kept beside the ledger move onto their runs; a rollback
moves them back for the release below."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from helpers import make_worker, put_schedule, set_next_run, tick, waiting_on_a_lock
from scrinalia_workers import sqlfiles
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "9c5564c"  # 0.6.0, head 0014_runner_stalls
STATEMENTS = {
    "enqueue": "SELECT * FROM scrinalia.enqueue(%s)",
    "claim": "SELECT * FROM scrinalia.claim_next(%s, %s)",
    "finish": "SELECT * FROM scrinalia.finish(%s, %s, 'SUCCEEDED')",
}
# 0015 and the migrations after it: what a migrate from 0.6.0 applies
FROM_0015 = [i for i in sqlfiles.migration_ids() if i >= "0015_run_catch_up_column"]
CATCH_UPS = "SELECT run_id FROM scrinalia.worker_run_history WHERE catch_up ORDER BY run_id"

pytestmark = pytest.mark.slow


@pytest.fixture
def previous_release(tmp_path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS], capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.fail(f"release 0.6.0 (commit {PREVIOUS}) is not in this clone's history: git fetch --unshallow")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    return tmp_path


def _previous_migrate(root: Path, dsn: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(root / "py_shim"), "SCRINALIA_ROOT": str(root)}
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "migrate", "--dsn", dsn],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def _period(c: psycopg.Connection) -> tuple[list[str], tuple]:
    """One period through the prepared statements: its columns each time, its row."""
    names = []
    cur = c.execute(STATEMENTS["enqueue"], ("ocr",))
    names.append([d.name for d in cur.description])
    cur = c.execute(STATEMENTS["claim"], ("r1", "1 minute"))
    names.append([d.name for d in cur.description])
    run = cur.fetchone()
    cols = names[-1]
    cur = c.execute(STATEMENTS["finish"], (run[cols.index("run_id")], run[cols.index("lease_token")]))
    names.append([d.name for d in cur.description])
    assert all(n == names[0] for n in names), names
    return names[0], cur.fetchone()


RENAMED_GRANTS = (
    "SELECT p.proname::text, g.rolname::text FROM pg_proc p, pg_roles g"
    " WHERE p.proname LIKE '%%before_0015' AND g.rolname LIKE 'scrinalia\\_%%'"
    " AND has_function_privilege(g.oid, p.oid, 'EXECUTE') ORDER BY 1, 2"
)


def test_prepared_statements_keep_their_result_through_the_migration_and_the_code(empty_db_dsn, previous_release):
    _previous_migrate(previous_release, empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True, prepare_threshold=0) as c:
        make_worker(c, "ocr")
        before, _ = _period(c)
        assert "catch_up" not in before
        prepared = c.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
        assert prepared >= len(STATEMENTS)

        # the migration's transaction alone, as between migrate's two: the previous
        # release's code still installed, renamed behind functions returning the old row
        with m._migrating(empty_db_dsn, lock_timeout=30) as (_conn, backend, migrations):
            assert [x.id for x in backend.to_apply(migrations)] == FROM_0015
            backend.apply_migrations(backend.to_apply(migrations))
        assert _period(c)[0] == before
        granted = c.execute(RENAMED_GRANTS).fetchall()
        assert ("reap_expired_leases_before_0015", "scrinalia_scheduler") in granted

        assert m.migrate(empty_db_dsn) == []  # the code
        # and who may call them: a call of the migration's wrapper under way as the code
        # commits runs the renamed function with its caller's rights
        assert c.execute(RENAMED_GRANTS).fetchall() == granted
        columns, row = _period(c)
        assert columns == before and row[columns.index("status")] == "SUCCEEDED"
        # the renamed ones stay for this release (a call of one under way elsewhere as the
        # code commits must still find it); no public name is one of them
        assert c.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE '%%before_0015'").fetchone() == (8,)
        assert m.migrate(empty_db_dsn) == [] and _period(c)[0] == before


def test_the_catch_ups_move_onto_their_runs_and_back(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        make_worker(c, "ocr")
        put_schedule(c, "ocr", "* * * * *", tz="UTC")
        tick(c)
        set_next_run(c, "ocr", "2 hours")
        tick(c)
        caught = c.execute(CATCH_UPS).fetchall()
        assert len(caught) == 1

    assert m.rollback(empty_db_dsn, count=len(FROM_0015)) == FROM_0015[::-1]
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute("SELECT run_id FROM scrinalia.archive_run_catch_ups").fetchall() == caught
        assert c.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'scrinalia.archive_worker_runs'::regclass"
            " AND attname = 'catch_up' AND NOT attisdropped"
        ).fetchone() == (0,)
        assert c.execute("SELECT to_regtype('scrinalia.worker_run_v1')").fetchone() == (None,)
        # the release below marks one more (its tick writes the table)
        c.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, scheduled_for, status, finished_at)"
            " VALUES ('ocr', 'SCHEDULE', now() - interval '1 day', 'SUCCEEDED', now())"
        )
        c.execute("INSERT INTO scrinalia.archive_run_catch_ups SELECT max(run_id) FROM scrinalia.archive_worker_runs")
        marked = c.execute("SELECT run_id FROM scrinalia.archive_run_catch_ups ORDER BY run_id").fetchall()

    assert m.migrate(empty_db_dsn) == FROM_0015
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(CATCH_UPS).fetchall() == marked
        assert c.execute("SELECT count(*) FROM scrinalia.archive_run_catch_ups").fetchone() == (0,)


@pytest.mark.parametrize("prepared", [False, True], ids=["parsed", "prepared"])
def test_a_call_waiting_while_the_ledger_widens_returns_the_row_it_was_planned_for(
    empty_db_dsn, previous_release, role_logins, prepared
):
    """A daemon of the release below calls a function returning the ledger's row just as
    the migration holds the ledger to add its column: the call waits for the migration
    and then returns the row of the release below, not an error ("structure of query
    does not match function result type") nor a row with the new column. Its statement
    parsed anew, or prepared on the server before the migration began, as that release's
    daemons do after a few calls. Each under its group's login, as in production."""
    _previous_migrate(previous_release, empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        for w in ("ocr", "pdf", "txt"):
            make_worker(c, w)
        before = [d.name for d in c.execute("SELECT * FROM scrinalia.enqueue('pdf')").description]
    # each call's group, statement, its arguments before the migration (when prepared) and during it
    calls = {
        "enqueue": ("operator", "SELECT * FROM scrinalia.enqueue(%s)", ("txt",), ("ocr",)),
        "claim_next": (
            "runner",
            "SELECT * FROM scrinalia.claim_next(%s, %s, %s)",
            ("r1", "1 minute", ["none"]),
            ("r1", "1 minute", ["pdf"]),
        ),
    }
    outcome: dict[str, object] = {}
    callers: list[tuple[psycopg.Connection, threading.Thread]] = []
    with psycopg.connect(empty_db_dsn, autocommit=True) as watch, psycopg.connect(empty_db_dsn) as blocker:
        for name, (group, statement, warm, args) in calls.items():
            conn = psycopg.connect(
                psycopg.conninfo.make_conninfo(empty_db_dsn, user=role_logins[group]),
                autocommit=True,
                prepare_threshold=0 if prepared else None,
            )
            if prepared:
                conn.execute(statement, warm)
            callers.append((conn, threading.Thread(target=_call, args=(conn, statement, args, outcome, name))))
        # the migration's last step waits behind this lock, holding the ledger meanwhile
        blocker.execute("LOCK TABLE scrinalia.archive_run_catch_ups IN ROW EXCLUSIVE MODE")
        migrating = threading.Thread(target=lambda: outcome.setdefault("migrate", _outcome(m.migrate, empty_db_dsn)))
        migrating.start()
        wait_for(
            lambda: (
                watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted"
                    " AND relation = 'scrinalia.archive_run_catch_ups'::regclass"
                ).fetchone()[0]
                > 0
            ),
            timeout=30,
            interval=0.02,
            what="the migration waits behind the blocker",
        )
        for (conn, t), name in zip(callers, calls):
            t.start()
            wait_for(
                lambda: waiting_on_a_lock(watch, conn.info.backend_pid),
                timeout=30,
                interval=0.02,
                what=f"{name} waits for the migration",
            )
        blocker.rollback()
        migrating.join(120)
        for conn, t in callers:
            t.join(60)
            conn.close()
    assert outcome["migrate"] == ("ok", FROM_0015)
    failures = {
        n: o for n, o in outcome.items() if n in calls and (o[0] != "ok" or o[1][0] != before or o[1][1] is None)
    }
    assert not failures, failures


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # the assertion names it
        return ("error", repr(e))


def _call(conn: psycopg.Connection, statement: str, args: tuple, outcome: dict, name: str) -> None:
    def run():
        cur = conn.execute(statement, args)
        return [d.name for d in cur.description], cur.fetchone()

    outcome[name] = _outcome(run)


def test_a_failed_second_step_leaves_the_first_for_the_daemons_and_the_next_migrate(empty_db_dsn, previous_release):
    """The column's transaction fails (here a lock it may not wait for): the functions of
    the release below stay switched to worker_run_v1 and go on answering its daemons,
    the ledger is as it was, and the next migrate completes the migration."""
    _previous_migrate(previous_release, empty_db_dsn)
    impatient = psycopg.conninfo.make_conninfo(empty_db_dsn, options="-c lock_timeout=300")
    with psycopg.connect(empty_db_dsn, autocommit=True) as c, psycopg.connect(empty_db_dsn) as blocker:
        make_worker(c, "ocr")
        before = [d.name for d in c.execute("SELECT * FROM scrinalia.enqueue('ocr')").description]
        blocker.execute("LOCK TABLE scrinalia.archive_run_catch_ups IN ROW EXCLUSIVE MODE")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            m.migrate(impatient)
        blocker.rollback()
        assert "0015_run_catch_up_column" not in m.applied_migrations(empty_db_dsn)
        assert c.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'scrinalia.archive_worker_runs'::regclass"
            " AND attname = 'catch_up' AND NOT attisdropped"
        ).fetchone() == (0,)
        assert c.execute(
            "SELECT pg_get_function_result(p.oid) FROM pg_proc p WHERE p.proname = 'claim_next'"
        ).fetchall() == [("SETOF scrinalia.worker_run_v1",)]
        c.execute("SELECT scrinalia.cancel_run(max(run_id)) FROM scrinalia.archive_worker_runs")
        cur = c.execute("SELECT * FROM scrinalia.enqueue('ocr')")
        assert [d.name for d in cur.description] == before and cur.fetchone() is not None

        assert m.migrate(empty_db_dsn) == FROM_0015
        assert c.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE '%%before_0015'").fetchone() == (8,)
        cur = c.execute("SELECT * FROM scrinalia.claim_next('r1', '1 minute')")
        assert [d.name for d in cur.description] == before and cur.fetchone() is not None


def test_a_call_begun_before_the_switch_reaches_the_ledger_before_the_column(
    empty_db_dsn, previous_release, role_logins
):
    """A call of the release below that began before the switch to worker_run_v1
    committed runs the renamed function's old body. Held up before it reached the
    ledger, it must still find the ledger's old row when it gets there: the column's
    step waits for the statements under way, then takes the ledger."""
    _previous_migrate(previous_release, empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        make_worker(c, "ocr")
        before = [d.name for d in c.execute("SELECT * FROM scrinalia.enqueue('ocr')").description]
        c.execute("SELECT scrinalia.cancel_run(max(run_id)) FROM scrinalia.archive_worker_runs")
    outcome: dict[str, object] = {}
    operator = psycopg.conninfo.make_conninfo(empty_db_dsn, user=role_logins["operator"])
    with psycopg.connect(empty_db_dsn, autocommit=True) as watch, psycopg.connect(empty_db_dsn) as blocker:
        blocker.execute("LOCK TABLE scrinalia.archive_workers IN ACCESS EXCLUSIVE MODE")
        caller = psycopg.connect(operator, autocommit=True)
        calling = threading.Thread(
            target=_call, args=(caller, "SELECT * FROM scrinalia.enqueue(%s)", ("ocr",), outcome, "enqueue")
        )
        calling.start()
        wait_for(
            lambda: waiting_on_a_lock(watch, caller.info.backend_pid), timeout=30, interval=0.02, what="the call waits"
        )
        migrating = threading.Thread(target=lambda: outcome.setdefault("migrate", _outcome(m.migrate, empty_db_dsn)))
        migrating.start()
        wait_for(
            lambda: watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'"
            ).fetchone()[0],
            timeout=30,
            interval=0.01,
            what="the column's step waits for the call under way",
        )
        blocker.rollback()
        calling.join(60)
        migrating.join(120)
        caller.close()
    assert outcome["migrate"] == ("ok", FROM_0015)
    kind, value = outcome["enqueue"]
    assert kind == "ok", value
    assert value[0] == before and value[1] is not None
