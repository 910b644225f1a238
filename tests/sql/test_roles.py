"""Roles: each group logs in and can do its job and nothing else."""

from __future__ import annotations

import re

import pytest

from helpers import make_worker, put_schedule, raises_sqlstate, tick

DENIED = "42501"


@pytest.fixture
def world(db):
    make_worker(db)
    put_schedule(db, "ocr")
    return db


def _refused(conn, sql, *args):
    with raises_sqlstate(DENIED):
        conn.execute(sql, args)


def _as_the_scheduler(conn) -> None:
    """A group grant lets a login *run* the scheduler; holding the lock makes its session one
    (before it, the scheduler's functions answer SW032)."""
    with raises_sqlstate("SW032"):
        conn.execute("SELECT * FROM scrinalia.reap_expired_leases()")
    assert conn.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0] is True


def test_reader_reads_the_views_and_nothing_else(world, connect_as):
    c = connect_as("reader")
    assert c.execute("SELECT count(*) FROM scrinalia.worker_agenda").fetchone()[0] == 1
    c.execute("SELECT * FROM scrinalia.worker_run_history")
    c.execute("SELECT * FROM scrinalia.worker_queue_counters")
    assert c.execute("SELECT cron FROM scrinalia.get_schedule('ocr')").fetchone()[0] == "0 2 * * *"
    assert c.execute("SELECT scrinalia.default_timezone()").fetchone()[0] == "UTC"
    assert c.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0] is False
    _refused(c, "SELECT * FROM scrinalia.archive_worker_runs")
    _refused(c, "SELECT * FROM scrinalia.archive_worker_schedules")
    _refused(c, "SELECT scrinalia.put_schedule('ocr', '0 3 * * *')")
    _refused(c, "SELECT scrinalia.enqueue('ocr')")
    _refused(c, "SELECT * FROM scrinalia.claim_next('r')")
    _refused(c, "SELECT * FROM scrinalia.due_schedules()")


def test_operator_writes_schedules_and_enqueues_but_does_not_run(world, connect_as):
    c = connect_as("operator")
    c.execute("SELECT scrinalia.put_schedule('ocr', '0 3 * * *', 'UTC')")
    c.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")
    run_id = c.execute("SELECT run_id FROM scrinalia.enqueue('ocr', '{}', 'MANUAL', 'alice')").fetchone()[0]
    c.execute("SELECT scrinalia.cancel_run(%s)", (run_id,))
    assert c.execute("SELECT count(*) FROM scrinalia.worker_run_history").fetchone()[0] == 1  # inherits reader
    _refused(c, "SELECT * FROM scrinalia.claim_next('r')")
    _refused(c, "SELECT * FROM scrinalia.heartbeat(1, gen_random_uuid())")
    # ADR 0015: the scheduler may run with the API's credential
    _as_the_scheduler(c)
    c.execute("SELECT * FROM scrinalia.tick(ARRAY[]::text[], ARRAY[]::timestamptz[])")
    _refused(c, "UPDATE scrinalia.archive_worker_schedules SET cron = 'x'")
    _refused(c, "SELECT scrinalia.register_worker('evil')")


def test_runner_claims_heartbeats_finishes_only(world, connect_as):
    world.execute("SELECT scrinalia.enqueue('ocr')")
    c = connect_as("runner")
    run_id, token = c.execute("SELECT run_id, lease_token FROM scrinalia.claim_next('runner-1')").fetchone()
    c.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    assert (
        c.execute("SELECT status FROM scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, token)).fetchone()[0]
        == "SUCCEEDED"
    )
    _refused(c, "SELECT scrinalia.enqueue('ocr')")
    _refused(c, "SELECT scrinalia.put_schedule('ocr', '0 3 * * *', 'UTC')")
    # ADR 0015: the least-privilege runner role can also run the scheduler
    _as_the_scheduler(c)
    c.execute("SELECT * FROM scrinalia.reap_expired_leases()")
    _refused(c, "SELECT * FROM scrinalia.worker_run_history")
    _refused(c, "UPDATE scrinalia.archive_worker_runs SET status = 'SUCCEEDED'")


def test_scheduler_ticks_and_reaps_only(world, connect_as):
    c = connect_as("scheduler")
    _as_the_scheduler(c)
    decisions = tick(c)[1]
    assert [d[1] for d in decisions] == ["ARMED"]
    c.execute("SELECT * FROM scrinalia.create_retries()")
    c.execute("SELECT * FROM scrinalia.reap_expired_leases()")
    c.execute("SELECT scrinalia.next_wakeup()")
    _refused(c, "SELECT scrinalia.enqueue('ocr')")
    _refused(c, "SELECT scrinalia.put_schedule('ocr', '0 3 * * *')")
    _refused(c, "SELECT * FROM scrinalia.claim_next('r')")
    _refused(c, "SELECT * FROM scrinalia.archive_worker_schedules")
    _refused(c, "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger) VALUES ('ocr', 'MANUAL')")


def test_a_login_without_a_group_gets_nothing(world, connect_as):
    c = connect_as("nobody")
    _refused(c, "SELECT * FROM scrinalia.worker_agenda")
    _refused(c, "SELECT scrinalia.schema_head()")


# The planner inlines these into the statements that call them, which a SET clause would
# stop (the tick's check of each next instant is cron_masks_match): one SQL query, not
# SECURITY DEFINER, every function and operator named by its schema instead, so that no
# caller's search_path can change what they mean.
INLINED = {
    "cron_grammar",
    "cron_fields",
    "cron_masks_match",
    "run_v1",
    "lateness_seconds",
    "schedule_is_overdue",
    "schedule_is_starved",
    "run_is_unclaimed",
}
# (coalesce is a keyword of the grammar, not a function a search_path could resolve)
SQL_WORDS = {
    "select",
    "from",
    "where",
    "when",
    "then",
    "else",
    "end",
    "case",
    "and",
    "or",
    "not",
    "as",
    "in",
    "row",
    "coalesce",
}


def unqualified_names(body: str) -> list[str]:
    """The functions and operators of a SQL body that a search_path would resolve."""
    body = re.sub(r"(?i)(?:\bE)?'(?:[^'\\]|\\.|'')*'", "''", body)  # string literals
    body = re.sub(r"OPERATOR\(pg_catalog\.[^)\s]+\)", " op ", body)
    body = re.sub(r"\b(?:pg_catalog|scrinalia)\.\w+", " qualified ", body)
    calls = [w for w in re.findall(r"\b(\w+)\s*\(", body) if w.lower() not in SQL_WORDS | {"qualified"}]
    return calls + re.findall(r"[<>=&|!~+*/%^#@-]+", body.replace("::", " "))


def test_every_function_pins_its_search_path_and_writers_are_security_definer(db):
    rows = db.execute("""
        SELECT p.oid::regprocedure::text, p.proname, p.prosecdef, p.proconfig, l.lanname, p.prosrc
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
         WHERE n.nspname = 'scrinalia'""").fetchall()
    assert rows
    assert INLINED <= {r[1] for r in rows}
    for name, proname, secdef, config, lang, src in rows:
        if proname in INLINED:
            assert config is None and not secdef and lang == "sql", name
            assert unqualified_names(src) == [], name
            continue
        assert config and any(c.startswith("search_path=pg_catalog") for c in config), name
    # the check of an inlined body can fail
    assert unqualified_names("SELECT pg_catalog.left(x, 1) = 'a' AND lower(y) OPERATOR(pg_catalog.=) '='") == [
        "lower",
        "=",
    ]
    granted = {
        r[0]
        for r in db.execute("""
        SELECT DISTINCT p.oid::regprocedure::text
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
               aclexplode(p.proacl) a JOIN pg_roles g ON g.oid = a.grantee
         WHERE n.nspname = 'scrinalia' AND g.rolname LIKE 'scrinalia\\_%' AND p.provolatile = 'v'""").fetchall()
    }
    assert granted
    insecure = [name for name, _proname, secdef, *_ in rows if name in granted and not secdef]
    assert insecure == []
