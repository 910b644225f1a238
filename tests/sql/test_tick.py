"""The tick: enqueue-or-skip and advance, one catch-up, row locks, one call for all."""

from __future__ import annotations

import re

import psycopg
import pytest

from helpers import (
    claim,
    finish,
    heap_pages,
    make_worker,
    make_workers,
    nested_plans,
    plan_reads,
    put_schedule,
    raises_sqlstate,
    run_row,
    set_next_run,
    tick,
)
from scrinalia_workers import cron


def armed(db, worker="ocr", cron="0 2 * * *", request=None):
    make_worker(db, worker)
    put_schedule(db, worker, cron, request=request)
    tick(db, only=[worker])
    return worker


def runs(db, worker="ocr"):
    return db.execute(
        "SELECT run_id, trigger, attempt, status, scheduled_for FROM scrinalia.archive_worker_runs "
        "WHERE worker_name = %s ORDER BY run_id",
        (worker,),
    ).fetchall()


def test_due_query_returns_due_and_unarmed_only(db):
    for w in ("due", "future", "unarmed", "paused"):
        make_worker(db, w)
        put_schedule(db, w, enabled=(w != "paused"))
    tick(db, only=["due", "future"])
    set_next_run(db, "due", "1 minute")
    names = [r[0] for r in db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()]
    assert names == ["unarmed", "due"]  # unarmed first, then by next_run_at


def test_due_query_skips_rows_locked_by_another_transaction(db, db_dsn):
    armed(db, "a")
    armed(db, "b")
    set_next_run(db, "a", "1 minute")
    set_next_run(db, "b", "1 minute")
    with psycopg.connect(db_dsn) as other:
        other.execute("SELECT 1 FROM scrinalia.archive_worker_schedules WHERE worker_name = 'a' FOR UPDATE")
        names = [r[0] for r in db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()]
        assert names == ["b"]
        other.rollback()


@pytest.mark.parametrize(
    "instant",
    [
        "4713-01-01 00:00+00 BC",
        "0001-01-01 00:00+00",
        "1969-12-31 23:59+00",
        "-infinity",
        "infinity",
        "10000-01-01 00:00+00",
        "20000-01-01 00:00+00",
    ],
)
def test_a_next_run_at_outside_the_periods_is_re_armed_never_run(db, instant):
    """Hand-written instants no cron of ours produces (some the shim cannot even read):
    due now, returned NULL, armed by the tick with no run, and next_wakeup() says now."""
    armed(db, "odd")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = %s::timestamptz", (instant,))
    assert db.execute("SELECT scrinalia.next_wakeup() <= now()").fetchone()[0]
    due = db.execute("SELECT worker_name, next_run_at::text FROM scrinalia.due_schedules()").fetchall()
    assert due == [("odd", None)]
    due, decisions = tick(db)
    assert [(d[0], d[1], d[2], d[3]) for d in decisions] == [("odd", "ARMED", None, None)]
    assert runs(db) == []


def test_the_edges_of_the_periods_are_periods(db):
    """9999-12-31 is kept (not due, and readable); 1970-01-01 is a period like any other."""
    armed(db, "early")
    armed(db, "late")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = CASE worker_name"
        " WHEN 'early' THEN timestamptz '1970-01-01 00:00+00' ELSE timestamptz '9999-12-31 23:59+00' END"
    )
    assert [r[0] for r in db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()] == ["early"]
    due, decisions = tick(db)
    assert [(d[0], d[1]) for d in decisions] == [("early", "ENQUEUED")]
    assert (
        db.execute("SELECT scheduled_for::text FROM scrinalia.archive_worker_runs").fetchone()[0]
        == "1970-01-01 00:00:00+00"
    )


def test_arming_computes_no_run(db):
    make_worker(db)
    put_schedule(db, "ocr")
    due, decisions = tick(db)
    assert [(d[0], d[1], d[2]) for d in decisions] == [("ocr", "ARMED", None)]
    assert runs(db) == []


def test_due_schedule_enqueues_one_scheduled_run_and_advances(db):
    armed(db, request={"options": {"lang": "eng"}})
    set_next_run(db, "ocr", "10 seconds")
    was = db.execute("SELECT next_run_at FROM scrinalia.archive_worker_schedules").fetchone()[0]
    due, decisions = tick(db)
    [(worker, decision, run_id, scheduled_for, next_at, reason)] = decisions
    assert (worker, decision, scheduled_for, reason) == ("ocr", "ENQUEUED", was, None)
    row = run_row(db, run_id)
    assert row["trigger"] == "SCHEDULE" and row["attempt"] == 1 and row["status"] == "QUEUED"
    assert row["request"] == {"options": {"lang": "eng"}}
    assert row["config"]["options"]["lang"] == "eng" and row["config"]["engine"] == "tesseract"
    assert row["scheduled_for"] == was and row["requested_by"] == "scheduler"
    s = db.execute(
        "SELECT next_run_at, last_enqueued_at, last_run_id FROM scrinalia.archive_worker_schedules"
    ).fetchone()
    assert s[0] == next_at and s[1] is not None and s[2] == run_id
    assert tick(db)[1] == []  # nothing due any more


def test_tick_while_a_run_is_active_skips_and_advances(db):
    armed(db)
    set_next_run(db, "ocr", "1 minute")
    run_id = tick(db)[1][0][2]
    claim(db)
    set_next_run(db, "ocr", "1 minute")
    [(_, decision, new_run, _, next_at, reason)] = tick(db)[1]
    assert (decision, new_run) == ("SKIPPED", None)
    assert reason == f"run #{run_id} is active"
    s = db.execute(
        "SELECT next_run_at, last_skipped_at, last_skip_reason FROM scrinalia.archive_worker_schedules"
    ).fetchone()
    assert s[0] == next_at and s[1] is not None and s[2] == reason
    assert len(runs(db)) == 1


def test_several_missed_periods_give_one_catch_up_run(db):
    armed(db)
    set_next_run(db, "ocr", "3 days")  # down for three days: dozens of periods
    decisions = tick(db)[1]
    assert [d[1] for d in decisions] == ["ENQUEUED"]
    assert len(runs(db)) == 1
    # the next occurrence handed in is in the future: nothing more is due
    assert tick(db)[1] == []
    assert len(runs(db)) == 1


def test_tick_rejects_bad_input(db):
    armed(db)
    with raises_sqlstate("SW030", "must be after now()"):
        db.execute("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[now() - interval '1 second'])")
    with raises_sqlstate("SW030", "same length"):
        db.execute("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[]::timestamptz[])")
    with raises_sqlstate("SW030", "named twice"):
        db.execute(
            "SELECT * FROM scrinalia.tick(ARRAY['ocr', 'ocr'], ARRAY[now() + interval '1 h', now() + interval '2 h'])"
        )
    with raises_sqlstate("SW030"):
        db.execute("SELECT * FROM scrinalia.tick(NULL, NULL)")


def test_tick_ignores_schedules_that_are_not_due(db):
    armed(db)
    out = db.execute("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[now() + interval '1 day'])").fetchall()
    assert out == [] and runs(db) == []


def test_a_period_cannot_be_enqueued_twice(db):
    armed(db)
    set_next_run(db, "ocr", "1 minute")
    run_id, token = None, None
    first = tick(db)[1][0]
    run_id, token = claim(db)[:2]
    finish(db, run_id, token)
    # a second scheduler that still saw the old next_run_at replays the same period
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = %s", (first[3],))
    [(_, decision, new_run, _, _, reason)] = tick(db)[1]
    assert (decision, new_run) == ("SKIPPED", None)
    assert "concurrently" in reason
    assert len(runs(db)) == 1


def test_skip_while_a_retry_waits_in_its_backoff(db):
    armed(db)
    set_next_run(db, "ocr", "1 minute")
    tick(db)
    run_id, token = claim(db)[:2]
    finish(db, run_id, token, "FAILED", "boom")
    [retry] = db.execute("SELECT run_id, not_before FROM scrinalia.create_retries()").fetchall()
    set_next_run(db, "ocr", "1 minute")
    [(_, decision, _, _, _, reason)] = tick(db)[1]
    assert decision == "SKIPPED" and reason == f"run #{retry[0]} is active"
    assert claim(db) is None  # the retry is not claimable before its not_before


def test_skip_while_a_retry_is_owed_but_not_yet_created(db):
    armed(db)
    set_next_run(db, "ocr", "1 minute")
    tick(db)
    run_id, token = claim(db)[:2]
    finish(db, run_id, token, "FAILED", "boom")
    set_next_run(db, "ocr", "1 minute")
    [(_, decision, _, _, _, reason)] = tick(db)[1]
    assert decision == "SKIPPED" and reason == f"run #{run_id} awaits its retry"


def test_one_call_decides_for_many_schedules(db):
    names = make_workers(db, 300)
    db.execute(
        """INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)
                  SELECT unnest(%s::text[]), '*/5 * * * *', 'UTC', now() - interval '1 minute'""",
        (names,),
    )
    db.execute(
        """INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger)
                  SELECT unnest(%s::text[]), 'MANUAL'""",
        (names[:100],),
    )
    due, decisions = tick(db)
    kinds = [d[1] for d in decisions]
    assert len(due) == 300
    assert kinds.count("SKIPPED") == 100 and kinds.count("ENQUEUED") == 200
    assert (
        db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at <= now()").fetchone()[0]
        == 0
    )


def test_the_tick_records_itself(db):
    armed(db)
    before = db.execute("SELECT ticks FROM scrinalia.scheduler_state").fetchone()[0]
    tick(db)
    after = db.execute("SELECT ticks, last_tick_by, last_tick_at FROM scrinalia.scheduler_state").fetchone()
    assert after[0] == before + 1 and after[1] == "test" and after[2] is not None


def test_next_wakeup_is_the_earliest_work(db):
    assert db.execute("SELECT scrinalia.next_wakeup()").fetchone()[0] is None
    armed(db)
    at = db.execute("SELECT next_run_at FROM scrinalia.archive_worker_schedules").fetchone()[0]
    assert db.execute("SELECT scrinalia.next_wakeup()").fetchone()[0] == at
    make_worker(db, "other")
    put_schedule(db, "other")  # unarmed: work now
    wake, now = db.execute("SELECT scrinalia.next_wakeup(), now()").fetchone()
    assert wake == now


def _tick_racing_an_enqueue(db_dsn, worker):
    """A tick that starts while an insert of a run of `worker` is not committed yet, which
    commits while the tick waits for the slot: (the inserted run, the tick's decisions).
    The insert is written by hand, as the owner (or an older release's enqueue) might:
    enqueue() itself holds the worker's schedule row first, and the tick skips that
    worker instead of waiting (tests/sql/test_no_stall.py)."""
    import threading

    with psycopg.connect(db_dsn) as api:  # a transaction still open: not committed yet
        manual = api.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger) VALUES (%s, 'MANUAL') RETURNING run_id",
            (worker,),
        ).fetchone()[0]
        out = []

        def scheduler():
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                out.append(tick(conn)[1])

        t = threading.Thread(target=scheduler)
        t.start()
        t.join(timeout=1)
        assert t.is_alive(), "the tick must wait for the uncommitted enqueue's slot"
        api.commit()
    t.join(timeout=10)
    return manual, out[0]


def test_a_manual_enqueue_racing_the_tick_keeps_the_slot_single(db, db_dsn):
    armed(db)
    set_next_run(db, "ocr", "1 minute")
    manual, decisions = _tick_racing_an_enqueue(db_dsn, "ocr")
    [(_, decision, run_id, _, _, reason)] = decisions
    # the tick's insert met the committed run and decided again, seeing it
    assert (decision, run_id, reason) == ("SKIPPED", None, f"run #{manual} is active")
    assert runs(db) == [(manual, "MANUAL", 1, "QUEUED", None)]


def test_scheduler_status_names_the_lock_holder(db, db_dsn):
    assert db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0] is False
    with psycopg.connect(db_dsn, autocommit=True, application_name="scrinalia-scheduler lock") as holder:
        assert holder.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
        pid = holder.info.backend_pid
        held, holder_pid, app = db.execute(
            "SELECT lock_held, holder_pid, holder_application FROM scrinalia.scheduler_status()"
        ).fetchone()
        assert (held, holder_pid, app) == (True, pid, "scrinalia-scheduler lock")


# --- issue 12: set-based config resolution, no JIT -------------------------------------

# The per-run PL/pgSQL rule as it stood before resolve_configs() (commit 5feeffc), kept
# here as the reference the set-based form must equal on any catalogue and request.
REFERENCE_RESOLVE_CONFIG = r"""
CREATE FUNCTION pg_temp.reference_resolve_config(p_worker_name text, p_request jsonb,
                                         OUT config jsonb, OUT sources jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    d jsonb;
    s jsonb;
    r jsonb := coalesce(p_request, '{}');
    preset jsonb;
    part text;
    key text;
    layer text;
    merged jsonb;
    merged_src jsonb;
    lv jsonb;
BEGIN
    SELECT coalesce(w.default_config, '{}'), coalesce(st.settings, '{}')
      INTO d, s
      FROM scrinalia.archive_workers w
      LEFT JOIN scrinalia.archive_worker_settings st USING (worker_name)
     WHERE w.worker_name = p_worker_name;
    d := coalesce(d, '{}');
    s := coalesce(s, '{}');
    config := '{}';
    sources := '{}';
    FOREACH part IN ARRAY ARRAY['engine', 'preset'] LOOP
        IF r ? part THEN
            config := config || jsonb_build_object(part, r -> part);
            sources := sources || jsonb_build_object(part, 'request');
        ELSIF s ? part THEN
            config := config || jsonb_build_object(part, s -> part);
            sources := sources || jsonb_build_object(part, 'settings');
        ELSIF d ? part THEN
            config := config || jsonb_build_object(part, d -> part);
            sources := sources || jsonb_build_object(part, 'default');
        END IF;
    END LOOP;
    SELECT w.presets -> (config ->> 'preset') INTO preset
      FROM scrinalia.archive_workers w WHERE w.worker_name = p_worker_name;
    preset := coalesce(preset, '{}');
    FOREACH part IN ARRAY ARRAY['options', 'engine_options'] LOOP
        merged := '{}';
        merged_src := '{}';
        FOREACH layer IN ARRAY ARRAY['default', 'settings', 'preset', 'request'] LOOP
            lv := CASE layer WHEN 'default' THEN d WHEN 'settings' THEN s
                             WHEN 'preset' THEN preset ELSE r END -> part;
            IF jsonb_typeof(lv) = 'object' THEN
                merged := merged || lv;
                FOR key IN SELECT jsonb_object_keys(lv) LOOP
                    merged_src := merged_src || jsonb_build_object(key, layer);
                END LOOP;
            END IF;
        END LOOP;
        config := config || jsonb_build_object(part, merged);
        sources := sources || jsonb_build_object(part, merged_src);
    END LOOP;
END $$;"""


def _random_layer(rnd, depth=0):
    """A request/settings/default layer, valid or not: the rule must never raise."""

    def value():
        return rnd.choice([1, 2.5, "x", True, None, [1], {"k": 1}, "fast", "archival"])

    def part():
        if rnd.random() < 0.2:
            return rnd.choice([[1, "a"], "str", 3, None, True])  # not an object: contributes nothing
        return {k: value() for k in rnd.sample(["a", "b", "c", "dpi"], rnd.randint(0, 3))}

    if rnd.random() < 0.05:
        return rnd.choice([["engine", "options"], "engine", 7, None])  # not an object at all
    layer = {}
    for key in ("engine", "preset"):
        if rnd.random() < 0.4:
            layer[key] = rnd.choice(["tesseract", "easyocr", "fast", "archival", "nope", 3, None, {"x": 1}])
    for key in ("options", "engine_options"):
        if rnd.random() < 0.7:
            layer[key] = part()
    return layer


def test_resolve_configs_equals_the_per_run_rule_on_random_catalogues(db):
    import random

    from psycopg.types.json import Jsonb

    db.execute(REFERENCE_RESOLVE_CONFIG)
    rnd = random.Random(12)
    workers = [f"rc{i:03d}" for i in range(60)]
    for w in workers:
        presets = {
            name: rnd.choice([_random_layer(rnd), "not-an-object", None, [1]])
            for name in rnd.sample(["fast", "archival", "3", "tesseract"], rnd.randint(0, 3))
        }
        default = _random_layer(rnd)
        db.execute(
            "INSERT INTO scrinalia.archive_workers (worker_name, presets, default_config) VALUES (%s, %s, %s)",
            (w, Jsonb(presets), Jsonb(default if isinstance(default, dict) else {"engine": "tesseract"})),
        )
        settings = _random_layer(rnd)
        if rnd.random() < 0.6 and isinstance(settings, dict):  # stored as given, invalid parts and all
            db.execute(
                "INSERT INTO scrinalia.archive_worker_settings (worker_name, settings) VALUES (%s, %s)",
                (w, Jsonb(settings)),
            )
    # pairs repeat (shared work), one worker is not in the catalogue, a request may be NULL
    pairs = [
        (rnd.choice(workers + ["missing"]), rnd.choice([None, {}, _random_layer(rnd), _random_layer(rnd)]))
        for _ in range(600)
    ]
    pairs += pairs[:50]
    names = [w for w, _ in pairs]
    reqs = [Jsonb(r) if r is not None else None for _, r in pairs]
    got = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE NOT (c.config = r.config AND c.sources = r.sources)),"
        "       count(*) FILTER (WHERE NOT (o.config = r.config AND o.sources = r.sources))"
        "  FROM scrinalia.resolve_configs(%s::text[], %s::jsonb[]) c"
        " CROSS JOIN LATERAL pg_temp.reference_resolve_config(c.worker_name, c.request) r"
        " CROSS JOIN LATERAL scrinalia.resolve_config(c.worker_name, c.request) o",
        (names, reqs),
    ).fetchone()
    distinct = len({(w, None if r is None else repr(r)) for w, r in pairs})
    assert got[0] >= distinct * 0.9 and got[0] <= distinct  # one row per distinct pair (jsonb equality)
    assert got[1:] == (0, 0)
    # and every input pair finds its row
    missing = db.execute(
        "SELECT count(*) FROM unnest(%s::text[], %s::jsonb[]) i(w, r) WHERE NOT EXISTS ("
        " SELECT FROM scrinalia.resolve_configs(%s::text[], %s::jsonb[]) c"
        "  WHERE c.worker_name = i.w AND c.request IS NOT DISTINCT FROM i.r)",
        (names, reqs, names, reqs),
    ).fetchone()[0]
    assert missing == 0


def test_tick_resolves_the_same_config_as_enqueue(db):
    armed(db, request={"preset": "archival", "options": {"lang": "eng"}})
    set_next_run(db, "ocr", "1 minute")
    run_id = tick(db)[1][0][2]
    row = run_row(db, run_id)
    want = db.execute(
        "SELECT config, sources FROM scrinalia.resolve_config('ocr', %s)", (psycopg.types.json.Jsonb(row["request"]),)
    ).fetchone()
    assert (row["config"], row["config_sources"]) == want
    assert row["config"]["options"] == {"dpi": 600, "lang": "eng", "deskew": True}


def test_the_tick_functions_never_jit_compile(db):
    rows = dict(
        db.execute(
            "SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'scrinalia' AND p.proname IN"
            " ('tick_schedules_v2', 'due_schedules', 'create_retries', 'resolve_configs')"
        ).fetchall()
    )
    # (tick_v2(), tick_due_at_v2() and their earlier forms are wrappers: their one
    # statement runs in tick_schedules_v2)
    assert set(rows) == {"tick_schedules_v2", "due_schedules", "create_retries", "resolve_configs"}
    for name, config in rows.items():
        assert "jit=off" in config, name


def test_create_retries_resolves_each_candidate_like_enqueue(db):
    from psycopg.types.json import Jsonb

    requests = [{}, {"preset": "fast"}, {"options": {"lang": "eng"}}, {"preset": "archival", "options": {"dpi": 72}}]
    for i in range(12):
        make_worker(db, f"rt{i:02d}")
        db.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, request, attempt,"
            " scheduled_for, finished_at, retry_pending)"
            " VALUES (%s, 'SCHEDULE', 'FAILED', %s, 1, now() - interval '1 hour', now(), true)",
            (f"rt{i:02d}", Jsonb(requests[i % len(requests)])),
        )
    db.execute("SELECT scrinalia.put_settings('rt01', '{\"options\": {\"dpi\": 200}}')")
    made = db.execute("SELECT count(*) FROM scrinalia.create_retries()").fetchone()[0]
    assert made == 12
    wrong = db.execute(
        "SELECT count(*) FROM scrinalia.archive_worker_runs r"
        " CROSS JOIN LATERAL scrinalia.resolve_config(r.worker_name, r.request) c"
        " WHERE r.attempt = 2 AND NOT (r.config = c.config AND r.config_sources = c.sources)"
    ).fetchone()[0]
    assert wrong == 0
    assert (
        db.execute(
            "SELECT config -> 'options' ->> 'dpi' FROM scrinalia.archive_worker_runs"
            " WHERE worker_name = 'rt01' AND attempt = 2"
        ).fetchone()[0]
        == "150"
    )  # the preset over settings


def test_a_racing_enqueue_leaves_the_other_schedules_enqueued_once(db, db_dsn):
    """The tick's first attempt fails on the racing run and is rolled back whole: the
    second decides every schedule again, so the others get one run each, not two."""
    for w in ("a", "b", "c"):
        armed(db, w)
        set_next_run(db, w, "1 minute")
    manual, decisions = _tick_racing_an_enqueue(db_dsn, "b")
    assert {d[0]: (d[1], d[5]) for d in decisions} == {
        "a": ("ENQUEUED", None),
        "b": ("SKIPPED", f"run #{manual} is active"),
        "c": ("ENQUEUED", None),
    }
    assert [(r[1], r[3]) for r in runs(db, "a")] == [("SCHEDULE", "QUEUED")]
    assert [(r[1], r[3]) for r in runs(db, "c")] == [("SCHEDULE", "QUEUED")]
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 3


@pytest.mark.parametrize("workers, errors", [(["ocr"], []), (["ocr"], None), (None, ["boom"]), (None, None)])
def test_set_schedules_aside_refuses_arrays_of_two_lengths_or_missing(db, workers, errors):
    armed(db)
    with raises_sqlstate("SW030", "two arrays of the same length"):
        db.execute("SELECT * FROM scrinalia.set_schedules_aside(%s::text[], %s::text[])", (workers, errors))
    assert db.execute("SELECT arm_error FROM scrinalia.archive_worker_schedules").fetchone()[0] is None


def assert_due_query_reads_few_pages(db, rows: int) -> None:
    """One due_schedules() call returns `rows` schedules and reads a few pages of the
    indexes and those rows' pages, where reading every schedule is hundreds."""
    returned, read = plan_reads(db, "SELECT * FROM scrinalia.due_schedules()")
    assert returned == rows
    assert heap_pages(db, "scrinalia.archive_worker_schedules") >= 50 and read < 50


def test_the_due_query_reads_only_the_due_schedules_call_after_call(db):
    """due_schedules() finds the few due schedules of a large catalogue through its
    index at every call of a session, not only the first five: the generic plan a
    session may keep from the sixth call on walked every schedule through a filter."""
    names = make_workers(db, 5000)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, '0 2 * * *', 'UTC', now() + interval '1 day' FROM unnest(%s::text[]) AS w",
        (names,),
    )
    # (the statistics taken while one in a hundred was overdue, as autovacuum may take them)
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 hour'"
        " WHERE worker_name LIKE '%%00'"
    )
    db.execute("ANALYZE scrinalia.archive_worker_schedules")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 day'")
    set_next_run(db, names[1234], "1 minute")
    set_next_run(db, names[4321], "1 minute")
    for _ in range(8):
        assert [r[0] for r in db.execute("SELECT * FROM scrinalia.due_schedules()")] == [names[1234], names[4321]]
    assert_due_query_reads_few_pages(db, 2)


def test_the_due_query_reads_only_the_due_schedules_whatever_the_statistics_say(db):
    """When the statistics were taken while every schedule was due (a scheduler down
    for a while, a spike at one instant), the due query still reads the few due now,
    not every schedule through the due-order index: each of the three kinds of due
    (unarmed, due, beyond the periods) is a range of an index of its own."""
    names = make_workers(db, 5000)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, '0 2 * * *', 'UTC', now() - interval '1 hour' FROM unnest(%s::text[]) AS w",
        (names,),
    )
    db.execute("ANALYZE scrinalia.archive_worker_schedules")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 day'")
    db.execute("VACUUM scrinalia.archive_worker_schedules")  # (no dead entry to step over)
    set_next_run(db, names[1234], "1 minute")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = NULL WHERE worker_name = %s", (names[4321],)
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = 'infinity' WHERE worker_name = %s", (names[42],)
    )
    due = [r[0] for r in db.execute("SELECT worker_name FROM scrinalia.due_schedules()")]
    assert due == [names[4321], names[1234], names[42]]  # unarmed first, by time, beyond the range last
    assert [r[0] for r in db.execute("SELECT worker_name FROM scrinalia.due_schedules(2)")] == due[:2]
    assert_due_query_reads_few_pages(db, 3)


def test_a_chunk_of_many_due_schedules_is_read_in_the_index_order_not_sorted(db):
    """The scheduler's pass takes the due schedules a chunk at a time: each chunk reads
    the next ones in the due-order index's order as far as its limit, not every due
    schedule found and sorted again for each chunk."""
    names = make_workers(db, 20000)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, '0 2 * * *', 'UTC', now() - make_interval(secs => 1 + (i * 7919) %% 7200)"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS u(w, i)",
        (names,),
    )
    db.execute("ANALYZE scrinalia.archive_worker_schedules")
    expected = [
        r[0]
        for r in db.execute(
            "SELECT worker_name FROM scrinalia.archive_worker_schedules ORDER BY next_run_at, worker_name LIMIT 4000"
        )
    ]
    plans = nested_plans(db)
    with db.transaction():
        got = [r[0] for r in db.execute("SELECT worker_name FROM scrinalia.due_schedules(4000)")]
    assert got == expected
    (due,) = [p for p in plans if "s.next_run_at <= now()" in p]
    assert "Index Scan using ix_worker_schedules_due_order" in due and "Sort" not in due, due


def _array_probes_repeated(plan: str, node: str) -> list[str]:
    """The nodes under `node` (a plan node's label) that test a parameter array (= ANY
    of a constant array) more than once: a scan run again for each outer row, each run
    reading (and, in a btree, sorting) the whole array."""
    lines = plan.splitlines()
    (top,) = [i for i, line in enumerate(lines) if node in line]
    depth = len(lines[top]) - len(lines[top].lstrip())
    found, loops, label = [], 1, ""
    for line in lines[top + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= depth:
            break
        if "->" in line:
            label = line.strip()
            loops = int(re.search(r"loops=(\d+)", line).group(1))
        elif loops > 1 and "= ANY ('{" in line:
            found.append(f"{label}: {line.strip()[:120]}")
    return found


def test_a_tick_of_a_few_thousand_finds_each_schedule_to_update_by_its_key(db):
    """The tick's update of the schedules it decided reads each row by its key, never
    by a scan that tests the tick's whole array of workers again for every decided
    row: estimated at a few rows, a tick of 2,500 among 10,000 schedules was planned
    as a loop over them, each turn an index scan on the key and the array: a time that
    grew with the square of the tick's size."""
    names = make_workers(db, 10000)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, format('%%s %%s * * *', i %% 60, i %% 24), 'UTC',"
        "        now() - make_interval(secs => 1 + (i * 7919) %% 7200)"
        "   FROM unnest(%s::text[]) WITH ORDINALITY AS u(w, i)",
        (names,),
    )
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, requested_by)"
        " SELECT w, 'MANUAL', 'test' FROM unnest(%s::text[]) AS w",
        (names[::2],),
    )
    for _ in range(10):  # (the dead versions every pass leaves: a table of many pages, as in use)
        db.execute("UPDATE scrinalia.archive_worker_schedules SET updated_at = updated_at")
    db.execute("VACUUM ANALYZE scrinalia.archive_worker_schedules")
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    plans = nested_plans(db, analyze=True)
    with db.transaction():
        due = db.execute("SELECT worker_name, cron, timezone, db_now FROM scrinalia.due_schedules(2500)").fetchall()
        nexts = [cron.next_occurrence(c, tz, now) for _, c, tz, now in due]
        decided = db.execute(
            "SELECT decision FROM scrinalia.tick(%s::text[], %s::timestamptz[], 'test')", ([d[0] for d in due], nexts)
        ).fetchall()
    assert len(decided) == len(due) == 2500
    assert {d[0] for d in decided} == {"ENQUEUED", "SKIPPED"}
    (plan,) = [p for p in plans if "Update on archive_worker_schedules" in p]
    assert _array_probes_repeated(plan, "Update on archive_worker_schedules") == [], plan


def _owed_retry_lookup_by_name(plans: list[str]) -> str:
    """In the plan of the tick's statement, the scan of the owed retries' index by the
    worker's name, with the line after it (its condition)."""
    (plan,) = [p for p in plans if "Update on archive_worker_schedules" in p and "CTE due" in p]
    lines = plan.splitlines()
    (by_name,) = [
        f"{line.strip()} / {lines[i + 1].strip()}"
        for i, line in enumerate(lines)
        if "ix_worker_runs_retry_pending on archive_worker_runs" in line
        and "worker_name = s.worker_name" in lines[i + 1]
    ]
    return by_name


def test_a_tick_looks_up_the_owed_retry_of_each_due_worker_by_its_name_and_only_when_one_is_owed(db):
    """Whether a due schedule's worker owes a retry: a lookup by the worker's name for
    each due schedule, none at all while the ledger owes no retry. The set of every owed
    retry, joined instead, was planned (from a catalogue where few schedules are due, as
    most of the time) as a loop that read the whole set again for each due schedule: on
    a ledger owing 1,800 retries, a tick of 300 took four times as long as one of 1,000."""
    names = make_workers(db, 3000)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, '0 3 * * *', 'UTC', now() + interval '1 day' FROM unnest(%s::text[]) AS w",
        (names,),
    )
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, started_at, finished_at)"
        " SELECT w, 'MANUAL', 'SUCCEEDED', now() - interval '2 days', now() - interval '2 days'"
        "   FROM unnest(%s::text[]) AS w, generate_series(1, 3)",
        (names,),
    )
    db.execute("VACUUM ANALYZE scrinalia.archive_worker_schedules, scrinalia.archive_worker_runs")
    make_due = (
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '10 seconds'"
        " WHERE worker_name = ANY (%s)"
    )
    plans = nested_plans(db, analyze=True)

    db.execute(make_due, (names[:30],))
    assert {d[1] for d in tick(db)[1]} == {"ENQUEUED"}
    by_name = _owed_retry_lookup_by_name(plans)
    assert "never executed" in by_name, by_name

    owing = names[1000:2000]
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, scheduled_for, started_at,"
        "  finished_at, error, retry_pending)"
        " SELECT w, 'SCHEDULE', 'FAILED', now() - interval '1 hour', now() - interval '1 hour',"
        "        now() - interval '59 minutes', 'transient', true FROM unnest(%s::text[]) AS w",
        (owing,),
    )
    due_now = names[100:120] + owing[:10]
    db.execute(make_due, (due_now,))
    plans.clear()
    _, decided = tick(db)
    assert sorted(d[0] for d in decided) == sorted(due_now)
    skipped = {d[0]: d[5] for d in decided if d[1] == "SKIPPED"}
    assert set(skipped) == set(owing[:10])
    assert all(reason.endswith("awaits its retry") for reason in skipped.values()), skipped
    assert {d[1] for d in decided if d[0] not in skipped} == {"ENQUEUED"}
    by_name = _owed_retry_lookup_by_name(plans)
    # (rows per loop: PostgreSQL 18 prints them with two decimals)
    rows, loops = re.search(r"rows=([\d.]+) loops=(\d+)", by_name).groups()
    assert int(loops) == len(due_now) and float(rows) <= 1, by_name
