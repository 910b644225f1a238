"""Scenario B: privileges, lease fencing and search_path attacks.

The functions are enumerated from pg_proc, so a function added later is covered
without editing this file: it is refused to every group not listed here.
"""

from __future__ import annotations

import psycopg
import pytest

from helpers import (
    claim,
    make_worker,
    put_schedule,
    raises_sqlstate,
    set_next_run,
    tick,
)
from invariants import check_all
from scrinalia_workers import cron

DENIED = "42501"

SHARED = {
    "schema_head",
    "validate_cron",
    "validate_timezone",
    "retry_delay",
    "retry_base_delay",
    "retry_max_delay",
    "retry_jitter",
    "max_cron_length",
    "max_timezone_length",
    "max_request_bytes",
    "max_attempts",
    "installed_release",
    "active_statuses",
    "terminal_statuses",
    "public_can_connect",
    "takeover_grant_missing",
    "cron_fires_at",
    "cron_field_values",
    "cron_grammar",
    "cron_fields",
    "cron_field_mask",
    "cron_masks",
    "cron_masks_match",
    "default_max_run_time",
}
READER = SHARED | {
    "get_schedule",
    "scheduler_status",
    "scheduler_health",
    "default_timezone",
    "current_alerts",
    "worker_metrics",
    "run_counts",
    "pending_run_counts",
    "scheduler_metrics",
    "worker_runs",
    "worker_timeline",
    "next_fires",
    "retention_status",
    # what status reads of a large install (89_agenda_pages.sql)
    "agenda_totals",
    "agenda_focus",
    "queue_totals",
    "busiest_queues",
    # the runners' stalls (38_runner_stalls.sql)
    "runner_stalls",
    "runner_stall_metrics",
}
OPERATOR = READER | {
    "put_schedule",
    "put_schedules",
    "set_schedule_enabled",
    "delete_schedule",
    "put_settings",
    "set_default_timezone",
    "enqueue",
    "enqueue_runs",
    "cancel_run",
    "add_units",
    "prune_runs",
    "rerun",
    "set_run_retention",
}
SCHEDULER = SHARED | {
    "due_schedules",
    "tick",
    "tick_due_at",
    "tick_v2",
    "tick_due_at_v2",
    "schedules_due_at",
    "create_retries",
    "reap_expired_leases",
    "next_wakeup",
    "scheduler_lock_key",
    "scheduler_status",
    "scheduler_health",
    "scheduler_heartbeat",
    "check_scheduler_lock",
    "evict_stale_scheduler",
    "evict_lock_holder",
    "take_scheduler_lock",
    "limit_scheduler_session",
    "limit_scheduler_lock_session",
    "limit_scheduler_work_session",
    "set_schedules_aside",
    # the repair of stored instants (sql/55_repair.sql)
    "repair_instants",
    "armed_schedule_crons",
    "rearm_schedules_ahead",
    # the pass's chores (85_retention.sql, 88_alerts.sql)
    "prune_expired_runs",
    "announce_alerts",
}
RUNNER = SHARED | {
    "claim_next",
    "heartbeat",
    "finish",
    "next_claimable_at",
    "mark_units_processed",
    "claim_runs",
    "heartbeat_runs",
    "finish_runs",
    "release_runs",
    "unregistered_workers",
    "report_runner_stuck",
    "clear_runner_stuck",
    "report_runner_stuck_exit",
}
# what monitoring/queries.yaml calls, and the schema head: no shared helper (its view: MONITOR_VIEWS)
MONITOR = {
    "schema_head",
    "installed_release",
    "scheduler_health",
    "scheduler_metrics",
    "worker_metrics",
    "run_counts",
    "pending_run_counts",  # (ledger_counts reads it)
    "retention_status",  # (numbers and instants: what status says of the retention)
    "runner_stall_metrics",  # (counts, no runner ids)
}
# ADR 0015: the API's (operator) login and a runner login may run the scheduler too
ALLOWED = {
    "reader": READER,
    "operator": OPERATOR | SCHEDULER,
    "runner": RUNNER | SCHEDULER,
    "scheduler": SCHEDULER,
    "monitor": MONITOR,
    "nobody": set(),
}
VIEWS = {"worker_agenda", "worker_run_history", "worker_queue_counters", "worker_catalogue", "ledger_counts"}
# the views the monitoring group reads: counts only, never a run's content
MONITOR_VIEWS = {"ledger_counts"}


def _functions(conn) -> list[tuple[str, str]]:
    """(name, oid, a call with every argument NULL of its type) of each scrinalia function.

    A STRICT immutable function called with NULL arguments is folded to NULL by the
    planner before any privilege is checked: its call is given one real text argument
    per text parameter instead, so that the executor does run it (and checks)."""
    return conn.execute("""
        SELECT p.proname, p.oid::int,
               format('SELECT * FROM scrinalia.%I(%s)', p.proname,
                      coalesce((SELECT string_agg(CASE WHEN p.proisstrict AND p.provolatile = 'i'
                                                       THEN format('(''x'' || random())::%s', format_type(t, NULL))
                                                       ELSE format('NULL::%s', format_type(t, NULL)) END,
                                                  ', ' ORDER BY i)
                                  FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)), ''))
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'scrinalia' AND p.prokind = 'f' AND p.prorettype <> 'trigger'::regtype
         ORDER BY 1, 3""").fetchall()


@pytest.fixture
def world(db):
    make_worker(db)
    put_schedule(db, "ocr")
    return db


@pytest.mark.parametrize("group", list(ALLOWED))
def test_every_function_outside_the_group_is_refused(world, connect_as, group):
    funcs = _functions(world)
    assert len(funcs) >= 30  # the enumeration found the API, not an empty schema
    c = connect_as(group)
    refused = 0
    for name, oid, call in funcs:
        can = c.execute("SELECT has_function_privilege(%s::oid, 'EXECUTE')", (oid,)).fetchone()[0]
        if name in ALLOWED[group]:
            assert can, f"{group} should be allowed {name}"
            continue
        assert not can, f"{group} may EXECUTE {name}, which is not in its job"
        with raises_sqlstate(DENIED):
            c.execute(call)
        refused += 1
    assert refused >= len(funcs) - len(ALLOWED[group]) - 1


@pytest.mark.parametrize("group", list(ALLOWED))
def test_no_table_is_readable_or_writable(world, connect_as, group):
    c = connect_as(group)
    rels = world.execute("""
        SELECT c.relname, c.relkind,
               (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0
                 ORDER BY a.attnum DESC LIMIT 1)
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'scrinalia' AND c.relkind IN ('r', 'v', 'S', 'p') ORDER BY 1""").fetchall()
    assert {r for r, k, _ in rels if k == "r"} >= {"archive_worker_runs", "archive_worker_schedules"}
    for rel, kind, col in rels:
        q = f'scrinalia."{rel}"'
        if kind == "S":
            with raises_sqlstate(DENIED):
                c.execute(f"SELECT nextval('{q}')")
            continue
        if kind == "v" and (
            (rel in VIEWS and group in ("reader", "operator")) or (rel in MONITOR_VIEWS and group == "monitor")
        ):
            c.execute(f"SELECT * FROM {q} LIMIT 1")
        else:
            with raises_sqlstate(DENIED):
                c.execute(f"SELECT * FROM {q} LIMIT 1")
        if group != "nobody":  # nobody cannot even resolve the name (no USAGE on the schema)
            assert not c.execute(
                "SELECT has_table_privilege(%s::regclass, 'INSERT, UPDATE, DELETE, TRUNCATE')", (f"scrinalia.{rel}",)
            ).fetchone()[0], rel
        for write in (f"DELETE FROM {q}", f'UPDATE {q} SET "{col}" = "{col}"', f"INSERT INTO {q} DEFAULT VALUES"):
            try:
                c.execute(write)
            except psycopg.Error as e:
                # 55000: a join view is not updatable at all, which refuses the write just as well
                assert e.sqlstate == DENIED or (kind == "v" and e.sqlstate == "55000"), f"{write}: {e}"
            else:
                raise AssertionError(f"{group} could run {write}")
    assert world.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules").fetchone()[0] == 1


def _expire(db, run_id):
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 s' WHERE run_id = %s",
        (run_id,),
    )


def test_a_stale_lease_cannot_heartbeat_or_finish(world, connect_as):
    a, b, s = connect_as("runner"), connect_as("runner"), connect_as("scheduler")
    assert s.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]  # the scheduler
    set_next_run(world, "ocr", "1 minute")
    tick(world)
    run_id, token, *_ = claim(a, "runner-a")
    # a token nobody was given
    with raises_sqlstate("SW020", "another lease holds it"):
        b.execute("SELECT scrinalia.heartbeat(%s, gen_random_uuid())", (run_id,))
    # the lease expires: refused before the reaper, and after it
    _expire(world, run_id)
    with raises_sqlstate("SW020", "expired"):
        a.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    assert [r[0] for r in s.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")] == [run_id]
    for sql in (
        "SELECT scrinalia.heartbeat(%s, %s)",
        "SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')",
        "SELECT scrinalia.finish(%s, %s, 'FAILED', 'late')",
    ):
        with raises_sqlstate("SW020", "INTERRUPTED"):
            a.execute(sql, (run_id, token))
    # the retry is created and claimed by another runner: the old token still fails, on both rows
    retry_id = s.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()[0]
    # the backoff passes: move the row's clock back (created_at with it, so its shape stays true)
    world.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = created_at - (not_before - now()), "
        "not_before = now() WHERE run_id = %s",
        (retry_id,),
    )
    r2, token2, *_ = claim(b, "runner-b")
    assert r2 == retry_id
    for rid in (run_id, retry_id):
        with raises_sqlstate("SW020"):
            a.execute("SELECT scrinalia.finish(%s, %s, 'FAILED', 'stale')", (rid, token))
        with raises_sqlstate("SW020"):
            a.execute("SELECT scrinalia.heartbeat(%s, %s)", (rid, token))
    row = world.execute(
        "SELECT status, lease_owner, error FROM scrinalia.archive_worker_runs WHERE run_id = %s", (retry_id,)
    ).fetchone()
    assert row == ("RUNNING", "runner-b", None)
    assert b.execute("SELECT status FROM scrinalia.finish(%s, %s, 'SUCCEEDED')", (r2, token2)).fetchone() == (
        "SUCCEEDED",
    )
    assert check_all(world) == []


# --- search_path attacks ------------------------------------------------------

EVIL = "sw_login_evil"


@pytest.fixture
def evil(db, db_dsn, admin):
    """A login in every group that owns a schema of traps shadowing names our code uses."""
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (EVIL,)).fetchone():
        admin.execute(f'CREATE ROLE "{EVIL}" LOGIN')
    for g in ("operator", "runner", "scheduler"):
        admin.execute(f'GRANT "scrinalia_{g}" TO "{EVIL}"')
    db.execute(f'CREATE SCHEMA evil AUTHORIZATION "{EVIL}"')
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(db_dsn, user=EVIL), autocommit=True)
    conn.execute("""
        CREATE TABLE evil.calls (what text, at timestamptz DEFAULT clock_timestamp());
        GRANT INSERT, SELECT ON evil.calls TO PUBLIC;
        CREATE FUNCTION evil.trap(w text) RETURNS void LANGUAGE sql
            AS $$ INSERT INTO evil.calls (what) VALUES (w) $$;
        CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('now'); RETURN '2000-01-01'; END $$;
        CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('lower'); RETURN $1; END $$;
        CREATE FUNCTION evil.format(text, VARIADIC text[]) RETURNS text LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('format'); RETURN 'pwned'; END $$;
        CREATE FUNCTION evil.left(text, integer) RETURNS text LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('left'); RETURN 'pwned'; END $$;
        CREATE FUNCTION evil.pg_notify(text, text) RETURNS void LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('pg_notify'); END $$;
        CREATE FUNCTION evil.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('gen_random_uuid'); RETURN '00000000-0000-0000-0000-000000000000'; END $$;
        CREATE FUNCTION evil.texteq(text, text) RETURNS boolean LANGUAGE plpgsql
            AS $$ BEGIN PERFORM evil.trap('='); RETURN true; END $$;
        CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq);
        CREATE TABLE evil.archive_worker_runs (LIKE pg_catalog.pg_class);
        CREATE TABLE evil.archive_worker_schedules (worker_name text);
        CREATE TABLE evil.settings (name text, value text);
        INSERT INTO evil.settings VALUES ('DEFAULT_TIMEZONE', 'Mars/Base');
        CREATE TEMP TABLE archive_worker_runs (x int);
        CREATE TEMP TABLE archive_worker_schedules (worker_name text);
        CREATE TEMP TABLE settings (name text, value text);
        INSERT INTO pg_temp.settings VALUES ('DEFAULT_TIMEZONE', 'Mars/Base');
    """)
    yield conn
    conn.close()
    db.execute("DROP SCHEMA evil CASCADE")


def test_traps_work_for_the_attacker_but_not_inside_our_functions(world, evil):
    evil.execute("SET search_path = evil, pg_catalog, pg_temp")
    # the traps are live: an unqualified call by the attacker falls into them
    evil.execute("SELECT now(), lower('X'), 'a' = 'b', left('abc', 1), format('%s', 'x'::text)")
    assert {r[0] for r in evil.execute("SELECT what FROM evil.calls")} == {"now", "lower", "=", "left", "format"}
    evil.execute("DELETE FROM evil.calls")

    # now every kind of our function, called through that search_path
    set_next_run(world, "ocr", "1 minute")
    s = evil.execute("SELECT cron, timezone FROM scrinalia.put_schedule('ocr', '5 4 * * *', NULL)").fetchone()
    assert s == ("5 4 * * *", "UTC")  # the real settings table, not evil's or pg_temp's
    world.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 min'")
    # the attacker runs the scheduler itself (its groups allow it): it holds the lock
    assert evil.execute("SELECT pg_catalog.pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    evil.execute("BEGIN")
    due = evil.execute("SELECT worker_name, db_now FROM scrinalia.due_schedules()").fetchall()
    assert [d[0] for d in due] == ["ocr"]
    dec = evil.execute(
        "SELECT worker_name, decision, run_id FROM scrinalia.tick(ARRAY['ocr'], %s::timestamptz[], 'evil')",
        ([cron.next_occurrence("5 4 * * *", "UTC", due[0][1])],),
    ).fetchall()
    evil.execute("COMMIT")
    assert [(d[0], d[1]) for d in dec] == [("ocr", "ENQUEUED")]
    run_id = dec[0][2]
    got = evil.execute("SELECT run_id, lease_token FROM scrinalia.claim_next('evil-runner', '1 minute')").fetchone()
    assert got[0] == run_id and str(got[1]) != "00000000-0000-0000-0000-000000000000"
    evil.execute("SELECT scrinalia.heartbeat(%s, %s)", got)
    fin = evil.execute(
        "SELECT status, error_fingerprint FROM scrinalia.finish(%s, %s, 'FAILED', 'boom 42')", got
    ).fetchone()
    assert fin[0] == "FAILED" and fin[1] != "pwned"
    retry = evil.execute("SELECT attempt, retry_of FROM scrinalia.create_retries()").fetchall()
    assert retry == [(2, run_id)]
    evil.execute("SELECT * FROM scrinalia.reap_expired_leases()")
    evil.execute("SELECT scrinalia.next_wakeup(), scrinalia.next_claimable_at(NULL), scrinalia.scheduler_status()")
    with raises_sqlstate("SW010"):
        evil.execute("SELECT scrinalia.enqueue('ocr', '{}', 'MANUAL', 'evil')")
    with raises_sqlstate("SW001", "'OCR'"):  # the trapped lower()/= would have matched 'ocr'
        evil.execute("SELECT scrinalia.enqueue('OCR')")
    evil.execute("SELECT scrinalia.put_settings('ocr', '{\"preset\": \"fast\"}')")
    evil.execute("SELECT scrinalia.add_units('ocr', ARRAY['u1'])")
    evil.execute("SELECT scrinalia.validate_cron('0 0 * * *'), scrinalia.validate_timezone('UTC')")
    with raises_sqlstate("SW004"):
        evil.execute("SELECT scrinalia.validate_timezone('Mars/Base')")
    evil.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")
    evil.execute("SELECT scrinalia.prune_runs('30 days')")

    assert evil.execute("SELECT count(*) FROM evil.calls").fetchone()[0] == 0, evil.execute(
        "SELECT array_agg(DISTINCT what) FROM evil.calls"
    ).fetchone()
    # the results are the real ones: the real clock, the real tables
    row = world.execute(
        "SELECT created_at > now() - interval '1 hour', error FROM scrinalia.archive_worker_runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    assert row == (True, "boom 42")
    assert evil.execute("SELECT count(*) FROM evil.archive_worker_runs").fetchone()[0] == 0
    assert evil.execute("SELECT count(*) FROM pg_temp.archive_worker_runs").fetchone()[0] == 0
    assert check_all(world) == []
