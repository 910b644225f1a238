"""The demo: its narrative and its ledger, and that it never touches data it did not create."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import make_worker
from scrinalia_workers.demo import handlers as demo_handlers
from scrinalia_workers.demo import narrate as demo
from scrinalia_workers.demo.setup import DEMO_TAG, NotADemoDatabase, disable, seed
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner.daemon import Runner
from scrinalia_workers.testkit.procs import Proc
from scrinalia_workers.testkit.waiting import wait_for

DEMO_WORKERS = sorted(demo_handlers.WORKERS)
ENV_DB_VARS = ("DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def one(conn, sql, *params):
    return conn.execute(sql, params).fetchone()


def demo_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "scrinalia_workers", "demo", *args]


def demo_env(env: dict | None = None) -> dict[str, str]:
    """Ours without the variables that name a database, plus env."""
    return {**{k: v for k, v in os.environ.items() if k not in ENV_DB_VARS}, **(env or {})}


def start_demo(procs, dsn: str) -> Proc:
    """The demo as a terminal runs it, in a process group of its own; its story (stdout)
    is read as it comes."""
    p = Proc(demo_argv("--dsn", dsn), lines="stdout", new_session=True, unset=ENV_DB_VARS)
    return procs.append(p)


def _await_runners(p: Proc) -> None:
    wait_for(
        lambda: any("runner started runner_id=demo-runner-2" in ln for ln in list(p.raw)),
        timeout=30,
        interval=0.1,
        what="the runners",
        watch=[p],
    )


# --- the whole demo, on a database of the user's that is empty -----------------------------


@pytest.mark.slow
def test_the_demo_shows_enqueue_natural_skip_catch_up_retry_and_tidies_up(empty_db_dsn):
    out = io.StringIO()
    result = {}
    t = threading.Thread(target=lambda: result.update(code=demo.run(dsn=empty_db_dsn, out=out)))
    t.start()
    try:
        wait_for(
            lambda: "runner started runner_id=demo-runner-2" in out.getvalue(),
            timeout=30,
            interval=0.1,
            what="the demo's runners",
        )
        # someone else's worker and run appear mid-demo: the demo's runners leave them alone
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            make_worker(conn, "intruder")
            intruder = one(conn, "SELECT run_id FROM scrinalia.enqueue('intruder', '{}', 'CLI')")[0]
    finally:
        t.join(120)  # the next minute plus a few seconds; the demo's own cap is longer
    assert not t.is_alive(), out.getvalue()
    text = out.getvalue()
    assert result["code"] == 0, text
    assert "Ctrl-C stops it" in text and "demo finished" in text
    assert "the demo ended before it could show" not in text, text

    # a natural skip: demo-ocr's period P was enqueued, its run still worked when the
    # next period came, and that later period, not P, was skipped
    enq = re.search(r"enqueued worker=demo-ocr run_id=\d+ scheduled_for=(\S+)", text).group(1)
    skipped = re.findall(r"skipped worker=demo-ocr scheduled_for=(\S+)", text)
    assert skipped and enq not in skipped
    assert datetime.fromisoformat(skipped[0]) == datetime.fromisoformat(enq) + timedelta(minutes=1)  # the next one
    assert re.search(r"^demo-ocr: a period came at \S+Z while run #\d+ is active: skipped, not queued", text, re.M)
    assert "catch-up worker=demo-reindex" in text and "retry created" in text
    assert "moves its not_before to now" in text
    # instants in the demo's own lines are ISO 8601 with a zone, never a bare 12:04:00
    own = [ln for ln in text.splitlines() if not ln.startswith("[")]
    bare = [ln for ln in own if re.search(r"(?<![T\d:])\d\d:\d\d(:\d\d)?(?![\d:.]*(Z|[+-]\d\d:\d\d| UTC))", ln)]
    assert bare == [], bare

    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        runs = conn.execute(
            "SELECT worker_name, status::text, attempt, retry_of IS NOT NULL"
            " FROM scrinalia.archive_worker_runs ORDER BY run_id"
        ).fetchall()
        assert ("demo-export", "FAILED", 1, False) in runs
        assert ("demo-export", "SUCCEEDED", 2, True) in runs
        # the catch-up is one run for three missed nights, not a replay
        assert [r for r in runs if r[0] == "demo-reindex"] == [("demo-reindex", "SUCCEEDED", 1, False)]
        assert sum(1 for r in runs if r[:2] == ("demo-thumbnails", "SUCCEEDED")) >= 2  # once a minute
        # the intruder's run was never claimed by the demo's runners
        assert one(
            conn,
            "SELECT status::text, lease_owner, started_at FROM scrinalia.archive_worker_runs WHERE run_id = %s",
            intruder,
        ) == ("QUEUED", None, None)
        # a user's database: the demo's schedules are paused, none of its runs left queued
        assert conn.execute("SELECT worker_name FROM scrinalia.archive_worker_schedules WHERE enabled").fetchall() == []
        assert (
            one(
                conn,
                "SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name LIKE 'demo-%%'"
                " AND status = ANY (scrinalia.active_statuses())",
            )[0]
            == 0
        )
        assert not one(conn, "SELECT lock_held FROM scrinalia.scheduler_status()")[0]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM"])
def test_ctrl_c_stops_the_demo_and_pauses_its_schedules(empty_db_dsn, how, procs):
    p = start_demo(procs, empty_db_dsn)
    _await_runners(p)
    if how == "Ctrl-C":
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
    else:
        p.kill(signal.SIGTERM)  # a supervisor's stop: the demo alone
    assert p.wait(30) == 130
    text = "".join(p.raw)
    assert "interrupted" in text and "paused the demo's schedules" in text, text
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT worker_name FROM scrinalia.archive_worker_schedules WHERE enabled").fetchall() == []
        # its scheduler and runners are gone with it
        _await_no_daemons(conn, timeout=5, what="the demo's daemons gone")
        assert (
            one(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name ~ '^scrinalia-(scheduler|runner)'",
            )[0]
            == 0
        )


# --- what the demo refuses ---------------------------------------------------------------


def _snapshot(conn) -> list:
    return [
        conn.execute(
            "SELECT worker_name, description, updated_at FROM scrinalia.archive_workers ORDER BY 1"
        ).fetchall(),
        conn.execute(
            "SELECT worker_name, cron, enabled, next_run_at, updated_at"
            " FROM scrinalia.archive_worker_schedules ORDER BY 1"
        ).fetchall(),
        conn.execute(
            "SELECT run_id, status::text, lease_owner FROM scrinalia.archive_worker_runs ORDER BY 1"
        ).fetchall(),
    ]


@pytest.mark.parametrize("how", ["--dsn", "DATABASE_URL"])
def test_the_demo_refuses_a_database_holding_other_workers(db, db_dsn, how):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.put_schedule('ocr', '* * * * *', 'UTC')")
    db.execute("SELECT scrinalia.enqueue('ocr', '{}', 'CLI')")
    before = _snapshot(db)
    args, env = (["--dsn", db_dsn], None) if how == "--dsn" else ([], {"DATABASE_URL": db_dsn})
    p = subprocess.run(demo_argv(*args), env=demo_env(env), capture_output=True, text=True, timeout=60)
    out, err = p.stdout, p.stderr
    assert p.returncode == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("scrinalia-workers: error: ")
    assert "1 worker(s) the demo did not create (ocr)" in lines[0] and "empty database" in lines[0]
    assert _snapshot(db) == before  # nothing written, nothing claimed


def test_the_demo_refuses_before_migrating_an_old_schema(empty_db_dsn):
    # a database with a catalogue of its own but an older schema: refused, not migrated
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA scrinalia")
        conn.execute("CREATE TABLE scrinalia.archive_workers (worker_name text PRIMARY KEY, description text)")
        conn.execute("INSERT INTO scrinalia.archive_workers VALUES ('legacy', 'ours')")
        with pytest.raises(NotADemoDatabase, match="legacy"):
            demo.run(dsn=empty_db_dsn, out=io.StringIO())
        assert conn.execute("SELECT to_regclass('public._yoyo_migration')").fetchone()[0] is None


def test_seed_is_idempotent_and_all_or_nothing(db):
    first = seed(db)
    assert [w for w, *_ in first] == list(demo_handlers.WORKERS) and all(ch for *_, ch in first)
    assert all(d.startswith(DEMO_TAG) for (d,) in db.execute("SELECT description FROM scrinalia.archive_workers"))
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = '2030-01-01Z'")
    again = seed(db)
    assert not any(ch for *_, ch in again)
    # an unchanged schedule is not re-armed
    assert {r[0] for r in db.execute("SELECT next_run_at FROM scrinalia.archive_worker_schedules")} == {
        datetime.fromisoformat("2030-01-01T00:00:00+00:00")
    }
    # paused (by the demo's end): seeding again resumes them
    paused, _ = disable(db)
    assert paused == DEMO_WORKERS
    assert all(ch for *_, ch in seed(db))
    assert db.execute("SELECT bool_and(enabled) FROM scrinalia.archive_worker_schedules").fetchone()[0]

    # the demo knows its workers from its record: a description somebody rewrote does not
    # make one foreign, and seeding again puts the demo's back
    db.execute("UPDATE scrinalia.archive_workers SET description = 'mine now' WHERE worker_name = 'demo-ocr'")
    seed(db)
    assert one(db, "SELECT description FROM scrinalia.archive_workers WHERE worker_name = 'demo-ocr'")[0].startswith(
        DEMO_TAG
    )


def test_disable_touches_only_the_demos_objects(db):
    seed(db)
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.put_schedule('ocr', '* * * * *', 'UTC')")
    mine = one(db, "SELECT run_id FROM scrinalia.enqueue('ocr', '{}', 'CLI')")[0]
    theirs = one(db, "SELECT run_id FROM scrinalia.enqueue('demo-thumbnails', '{}', 'CLI')")[0]
    paused, cancelled = disable(db)
    assert paused == DEMO_WORKERS and cancelled == [theirs]
    assert one(db, "SELECT enabled FROM scrinalia.archive_worker_schedules WHERE worker_name = 'ocr'")[0]
    assert one(db, "SELECT status::text FROM scrinalia.archive_worker_runs WHERE run_id = %s", mine)[0] == "QUEUED"


def test_a_foreign_worker_that_copies_the_demos_tag_is_never_the_demos(db):
    """The demo knows its workers from its record: a worker anybody registers with a
    description that starts like the demo's (or even one of the demo's names, before the
    demo ran) is not touched by the tidy-up, and makes the demo refuse the database."""
    seed(db)
    make_worker(db, "lookalike")
    db.execute("UPDATE scrinalia.archive_workers SET description = %s WHERE worker_name = 'lookalike'", (DEMO_TAG,))
    db.execute("SELECT scrinalia.put_schedule('lookalike', '* * * * *', 'UTC')")
    queued = one(db, "SELECT run_id FROM scrinalia.enqueue('lookalike', '{}', 'CLI')")[0]
    paused, cancelled = disable(db)
    assert "lookalike" not in paused and queued not in cancelled
    assert one(db, "SELECT enabled FROM scrinalia.archive_worker_schedules WHERE worker_name = 'lookalike'")[0]
    before = _snapshot(db)
    with pytest.raises(NotADemoDatabase, match="lookalike"):
        seed(db)
    assert _snapshot(db) == before  # all or nothing


def test_a_database_whose_demo_named_worker_the_demo_did_not_register_is_refused(db):
    make_worker(db, "demo-ocr")
    db.execute("UPDATE scrinalia.archive_workers SET description = %s WHERE worker_name = 'demo-ocr'", (DEMO_TAG,))
    with pytest.raises(NotADemoDatabase, match="demo-ocr"):
        seed(db)
    assert disable(db) == ([], [])


# --- the demo's runner and narration ------------------------------------------------------


def test_the_demo_handlers_claim_only_the_demo_workers(db, db_dsn):
    seed(db)
    make_worker(db, "ocr")
    other = one(db, "SELECT run_id FROM scrinalia.enqueue('ocr', '{}', 'CLI')")[0]
    ours = one(
        db, "SELECT run_id FROM scrinalia.enqueue('demo-thumbnails', %s, 'CLI')", Jsonb({"options": {"seconds": 0}})
    )[0]
    assert "*" not in demo_handlers.HANDLERS
    r = Runner(db_dsn, demo_handlers.HANDLERS, log=EventLog(stream=open(os.devnull, "w")))
    try:
        assert r.run_once().run_id == ours
        assert r.run_once() is None
    finally:
        r.close()
    assert one(db, "SELECT status::text, lease_owner FROM scrinalia.archive_worker_runs WHERE run_id = %s", other) == (
        "QUEUED",
        None,
    )


def test_a_silence_says_what_the_demo_waits_for(db, db_dsn):
    seed(db)
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = date_trunc('minute', now())"
        " + interval '1 minute' WHERE worker_name IN ('demo-ocr', 'demo-thumbnails')"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 hour'"
        " WHERE worker_name NOT IN ('demo-ocr', 'demo-thumbnails')"
    )
    running = one(db, "SELECT run_id FROM scrinalia.enqueue('demo-export', '{}', 'CLI')")[0]
    out = io.StringIO()
    d = demo.Demo(db_dsn, None, out, user_db=True)
    d.waiting(db)
    line = out.getvalue().strip()
    assert re.fullmatch(
        r"\.\.\. waiting for the \d{4}-\d\d-\d\dT\d\d:\d\d:00Z period of demo-ocr, "
        rf"demo-thumbnails \(in \d+ s\); run #{running} of demo-export is QUEUED",
        line,
    ), line


@pytest.mark.slow
def _await_no_daemons(conn, timeout: float, what: str) -> None:
    """No session of the demo's scheduler or runners is left in its database."""
    wait_for(
        lambda: (
            one(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name ~ '^scrinalia-(scheduler|runner)'",
            )[0]
            == 0
        ),
        timeout=timeout,
        interval=0.1,
        what=what,
    )


def test_the_demos_daemons_die_with_it(empty_db_dsn, procs):
    p = start_demo(procs, empty_db_dsn)
    _await_runners(p)
    p.kill()  # no chance to tidy up: its children must not outlive it all the same
    p.popen.wait()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        _await_no_daemons(conn, timeout=15, what="the orphaned daemons gone")


def test_the_load_handler_takes_every_worker(db, db_dsn):
    """load_handlers ("*") is the load tests' module: any worker, driven by the options."""
    from scrinalia_workers.demo import load_handlers

    make_worker(db, "anything")
    db.execute("SELECT scrinalia.register_worker('loaded', p_options => %s)", (Jsonb(load_handlers.DEMO_OPTIONS),))
    a = one(db, "SELECT run_id FROM scrinalia.enqueue('anything', '{}', 'CLI')")[0]
    b = one(
        db,
        "SELECT run_id FROM scrinalia.enqueue('loaded', %s, 'CLI')",
        Jsonb({"options": {"seconds": 0, "fail_rate": 1}}),
    )[0]
    r = Runner(db_dsn, load_handlers.HANDLERS, log=EventLog(stream=open(os.devnull, "w")))
    try:
        assert {r.run_once().end, r.run_once().end} == {"SUCCEEDED", "FAILED"}
    finally:
        r.close()
    assert dict(db.execute("SELECT run_id, status::text FROM scrinalia.archive_worker_runs").fetchall()) == {
        a: "SUCCEEDED",
        b: "FAILED",
    }


@pytest.mark.slow
def test_a_migrated_empty_database_then_the_demos_own_are_accepted(db, db_dsn):
    # migrated, but no workers, runs or schedules: accepted; then it holds only the
    # demo's own objects (paused by the first run): accepted again, resumed
    for _attempt in (1, 2):
        out = io.StringIO()
        assert demo.run(duration=3, dsn=db_dsn, out=out) == 0, out.getvalue()
        assert "demo finished" in out.getvalue()
        assert [
            r[0] for r in db.execute("SELECT worker_name FROM scrinalia.archive_workers ORDER BY 1")
        ] == DEMO_WORKERS
        assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE enabled").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] > 0
