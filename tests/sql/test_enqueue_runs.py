"""enqueue_runs(): the set-based enqueue, all or nothing, held to enqueue()'s rules."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import (
    make_worker,
    make_workers,
    next_occurrence,
    put_schedule,
    raises_sqlstate,
    set_next_run,
    tick,
    waiting_on_a_lock,
)
from scrinalia_workers.testkit.waiting import wait_for

COLUMNS = "worker_name, status::text, trigger::text, request, config, config_sources, requested_by, attempt"


def enqueue_runs(conn, workers, requests=None, trigger="MANUAL", by="alice"):
    reqs = None if requests is None else [None if r is None else Jsonb(r) for r in requests]
    return conn.execute(
        f"SELECT {COLUMNS} FROM scrinalia.enqueue_runs(%s::text[], %s::jsonb[], %s, %s)",
        (workers, reqs, trigger, by),
    ).fetchall()


def runs(conn):
    return conn.execute(f"SELECT {COLUMNS} FROM scrinalia.archive_worker_runs ORDER BY worker_name").fetchall()


def count(conn) -> int:
    return conn.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0]


REQUESTS = [{"preset": "fast"}, {}, None, {"engine": "easyocr", "engine_options": {"gpu": True}}]


def test_it_writes_what_as_many_enqueue_calls_write(db):
    workers = [make_worker(db, w) for w in ("ocr-d", "ocr-a", "ocr-c", "ocr-b")]
    got = enqueue_runs(db, workers, REQUESTS, "CLI", "bob")
    assert [r[0] for r in got] == sorted(workers)  # in worker order
    batch = runs(db)
    assert got == batch
    db.execute("TRUNCATE scrinalia.archive_worker_runs")
    for w, r in zip(workers, REQUESTS, strict=True):
        db.execute("SELECT scrinalia.enqueue(%s, %s, 'CLI', 'bob')", (w, None if r is None else Jsonb(r)))
    assert runs(db) == batch
    assert {r[1] for r in batch} == {"QUEUED"} and batch[0][5]["options"]["dpi"] == "default"


def test_requests_null_is_empty_requests_and_an_empty_batch_writes_nothing(db):
    workers = make_workers(db, 3)
    assert enqueue_runs(db, []) == []
    assert [r[3] for r in enqueue_runs(db, workers)] == [{}, {}, {}]
    assert count(db) == 3


@pytest.mark.parametrize(
    "workers, requests, trigger, by, sqlstate, fragments",
    [
        (None, None, "MANUAL", None, "SW002", ["an array of worker names, not NULL"]),
        (["ocr", "thumbs"], [{}], "MANUAL", None, "SW002", ["as many requests as worker names", "not 1 for 2"]),
        (["ocr"], None, "SCHEDULE", None, "SW002", ["trigger MANUAL or CLI, not SCHEDULE"]),
        (["ocr", "thumbs", "ocr"], None, "MANUAL", None, "SW002", ["enqueue #3: worker 'ocr' is named twice"]),
        (["ocr", "nope", "nada"], None, "MANUAL", None, "SW001", ["enqueue #2 (worker 'nope'): unknown worker 'nope'"]),
        (["ocr", None], None, "MANUAL", None, "SW001", ["enqueue #2: unknown worker NULL"]),
        (
            ["thumbs", "ocr"],
            [{}, {"options": {"dpi": "300"}}],
            "MANUAL",
            None,
            "SW002",
            ["enqueue #2 (worker 'ocr'): invalid request for worker 'ocr': options.dpi must be an integer"],
        ),
        (["ocr"], [[]], "MANUAL", None, "SW002", ["enqueue #1 (worker 'ocr')", "must be a JSON object"]),
        (["ocr"], None, "MANUAL", "x" * 201, "SW002", ["requested_by is 201 characters long"]),
    ],
)
def test_a_refused_batch_names_the_element_and_writes_nothing(db, workers, requests, trigger, by, sqlstate, fragments):
    make_worker(db, "ocr")
    make_worker(db, "thumbs")
    with raises_sqlstate(sqlstate, *fragments):
        enqueue_runs(db, workers, requests, trigger, by)
    assert count(db) == 0


def test_busy_slots_are_named_the_first_in_the_message_all_in_the_detail(db):
    workers = make_workers(db, 30)
    db.execute("SELECT scrinalia.enqueue('w00003')")
    enqueue_runs(db, workers[10:])
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, scheduled_for, status, finished_at,"
        " retry_pending) VALUES ('w00005', 'SCHEDULE', now(), 'FAILED', now(), true)"
    )
    before = count(db)
    with pytest.raises(psycopg.Error) as e:
        enqueue_runs(db, workers)
    assert e.value.sqlstate == "SW010"
    assert e.value.diag.message_primary.startswith("enqueue #4 (worker 'w00003'): worker 'w00003' is busy: run #")
    detail = e.value.diag.message_detail
    assert detail.startswith("busy: 22 of the 30 workers ('w00003', 'w00005', 'w00010',") and detail.endswith(", ...)")
    assert "one run per worker" in e.value.diag.message_hint
    with raises_sqlstate("SW010", "enqueue #1 (worker 'w00005')", "is owed its retry"):
        enqueue_runs(db, ["w00005", "w00001"])
    assert count(db) == before


def test_it_notifies_each_run_as_enqueue_does(db, db_dsn):
    workers = make_workers(db, 3)
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_runs")
        enqueue_runs(db, workers)
        got = [n.payload for n in listener.notifies(timeout=5, stop_after=3)]
    assert sorted(got) == workers


def test_two_batches_sharing_workers_never_deadlock_and_one_takes_the_slots(db, db_dsn):
    workers = make_workers(db, 200)
    barrier = threading.Barrier(2)
    outcomes = []

    def go(order):
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            barrier.wait()
            try:
                enqueue_runs(conn, order)
                outcomes.append("ok")
            except psycopg.Error as e:
                outcomes.append(e.sqlstate)

    threads = [threading.Thread(target=go, args=(o,)) for o in (workers, workers[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["SW010", "ok"]
    assert count(db) == 200


def test_a_run_committed_after_the_check_answers_slot_busy_naming_its_worker(db, db_dsn, connect_as):
    make_workers(db, 3)
    first = connect_as("operator")
    first.autocommit = False
    first.execute("SELECT scrinalia.enqueue('w00002')")  # not committed: the batch's check cannot see it
    batch = connect_as("operator")
    pid = batch.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcome = []

    def go():
        try:
            enqueue_runs(batch, ["w00000", "w00002", "w00001"])
            outcome.append("ok")
        except psycopg.Error as e:
            outcome.append((e.sqlstate, e.diag.message_primary))

    t = threading.Thread(target=go)
    t.start()
    wait_for(lambda: waiting_on_a_lock(db, pid), timeout=10, what="the batch waits on the uncommitted run")
    first.commit()
    t.join(timeout=10)
    assert outcome and outcome[0][0] == "SW010"
    assert outcome[0][1].startswith("enqueue #2 (worker 'w00002'): worker 'w00002' is busy: run #")
    assert count(db) == 1


def test_an_open_batch_holds_back_only_its_workers_periods(db, connect_as):
    db.execute("SET lock_timeout = '500ms'")  # the scheduler: never waits on it
    for w in ("u1", "u2", "u3"):
        make_worker(db, w)
        put_schedule(db, w)
    tick(db)  # armed
    for w in ("u1", "u2", "u3"):
        set_next_run(db, w, "1 minute")
    careless = connect_as("operator")
    careless.autocommit = False
    enqueue_runs(careless, ["u3", "u1"])  # left open
    _, rows = tick(db)
    assert {r[0]: r[1] for r in rows} == {"u2": "ENQUEUED"}
    careless.commit()
    _, rows = tick(db)
    assert {r[0]: r[1] for r in rows} == {"u1": "SKIPPED", "u3": "SKIPPED"}


def test_a_batch_waits_for_a_tick_deciding_its_worker_then_answers_slot_busy(db, db_dsn, connect_as):
    make_worker(db, "u1")
    make_worker(db, "u2")
    put_schedule(db, "u1")
    tick(db)
    set_next_run(db, "u1", "1 minute")
    op = connect_as("operator")
    with psycopg.connect(db_dsn) as sched:
        sched.execute("SELECT * FROM scrinalia.due_schedules()")
        nxt = next_occurrence(sched, "u1")
        sched.execute("SELECT * FROM scrinalia.tick(ARRAY['u1'], %s::timestamptz[], 'test')", ([nxt],)).fetchall()
        op.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            enqueue_runs(op, ["u2", "u1"])
        sched.commit()
    with raises_sqlstate("SW010", "enqueue #2 (worker 'u1')", "(SCHEDULE attempt 1/3)"):
        enqueue_runs(op, ["u2", "u1"])
    assert count(db) == 1


def test_a_request_is_judged_against_each_workers_own_catalogue_and_settings(db):
    # the request is checked once per distinct (request, catalogue, configured engine):
    # workers alike share a check, workers that differ do not
    for w in ("ocr-1", "ocr-2", "ocr-3"):
        make_worker(db, w)
    make_worker(db, "plain", {"engines": {}, "presets": {}, "options": {}, "default_config": {}})
    db.execute("SELECT scrinalia.put_settings('ocr-3', '{\"engine\": \"easyocr\"}')")
    psm = {"engine_options": {"psm": 3}}
    with raises_sqlstate("SW002", "enqueue #3 (worker 'ocr-3'):", "unknown engine_options (engine easyocr) key 'psm'"):
        enqueue_runs(db, ["ocr-1", "ocr-2", "ocr-3"], [psm, psm, psm])
    dpi = {"options": {"dpi": 600}}
    with raises_sqlstate("SW002", "enqueue #2 (worker 'plain'):", "unknown options key 'dpi'"):
        enqueue_runs(db, ["ocr-1", "plain", "ocr-2"], [dpi, dpi, dpi])
    assert count(db) == 0
    assert len(enqueue_runs(db, ["ocr-1", "ocr-2", "plain"], [psm, psm, {}])) == 3


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ"])
def test_a_slot_taken_after_the_check_names_its_worker(db, db_dsn, isolation):
    """Another session's enqueue, not committed when the batch looks at the slots,
    commits while the batch inserts: the batch fails whole with SW010 naming that
    worker, and leaves nothing behind."""
    names = make_workers(db, 3)
    with psycopg.connect(db_dsn) as other:
        other.execute("SELECT scrinalia.enqueue(%s)", (names[1],))  # uncommitted: the check cannot see it
        outcome: dict = {}

        def batch() -> None:
            with psycopg.connect(db_dsn, autocommit=True) as c:
                try:
                    with c.transaction():
                        c.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
                        c.execute("SELECT * FROM scrinalia.enqueue_runs(%s)", (names,)).fetchall()
                except psycopg.Error as e:
                    outcome["error"] = e

        t = threading.Thread(target=batch)
        t.start()
        wait_for(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%enqueue_runs%'"
                ).fetchone()[0]
                == 1
            ),
            timeout=15,
            what="the batch waiting on the other session's slot",
        )
        other.commit()
        t.join(15)
    e = outcome["error"]
    if isolation == "READ COMMITTED":
        assert e.sqlstate == "SW010", e
        assert f"enqueue #2 (worker '{names[1]}')" in e.diag.message_primary
    else:  # the snapshot cannot see the other run: the conflict says so
        assert e.sqlstate in ("SW010", "40001"), e
    assert db.execute(
        "SELECT array_agg(worker_name ORDER BY worker_name) FROM scrinalia.archive_worker_runs"
    ).fetchone()[0] == [names[1]]


# enqueue() is enqueue_runs() of one element: each refusal is the same error, SQLSTATE,
# message, hint and detail, but for the element's number enqueue_runs puts first.
ONE_ELEMENT_REFUSALS = [
    ("nope", {}, "MANUAL", None),
    (None, {}, "MANUAL", None),
    ("ocr", {"options": {"dpi": "300"}}, "MANUAL", None),
    ("ocr", {"colour": 1}, "MANUAL", None),
    ("ocr", {"engine": "nope"}, "MANUAL", None),
    ("ocr", {"engine_options": {"nope": 1}}, "MANUAL", None),
    ("ocr", [], "MANUAL", None),
    ("ocr", {}, "SCHEDULE", None),
    ("ocr", {}, "MANUAL", "x" * 201),
    ("busy", {}, "MANUAL", None),
    ("owed", {"preset": "fast"}, "CLI", None),
]


def _refusal(conn, sql, args):
    with pytest.raises(psycopg.Error) as e, conn.transaction():
        conn.execute(sql, args)
    d = e.value.diag
    return e.value.sqlstate, d.message_primary, d.message_hint, d.message_detail


@pytest.mark.parametrize("worker, request_, trigger, by", ONE_ELEMENT_REFUSALS)
def test_enqueue_refuses_exactly_as_enqueue_runs_of_its_one_element(db, worker, request_, trigger, by):
    for w in ("ocr", "busy", "owed"):
        make_worker(db, w)
    db.execute("SELECT scrinalia.enqueue('busy')")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, scheduled_for, status, finished_at,"
        " retry_pending) VALUES ('owed', 'SCHEDULE', now(), 'FAILED', now(), true)"
    )
    before = count(db)
    one = _refusal(db, "SELECT run_id FROM scrinalia.enqueue(%s, %s, %s, %s)", (worker, Jsonb(request_), trigger, by))
    batch = _refusal(
        db,
        "SELECT run_id FROM scrinalia.enqueue_runs(%s::text[], %s::jsonb[], %s, %s)",
        ([worker], [Jsonb(request_)], trigger, by),
    )
    assert count(db) == before
    assert one[0] == batch[0] and one[0] is not None
    assert one[2] == batch[2]
    message = batch[1]
    if message.startswith("enqueue #1"):
        prefix = "enqueue #1: " if worker is None else f"enqueue #1 (worker '{worker}'): "
        assert message.startswith(prefix), message
        message = message[len(prefix) :]
    assert one[1] == message.replace("enqueue_runs takes", "enqueue takes")
    if one[0] == "SW010":  # the batch's detail counts its busy workers; the one call has none
        assert one[3] is None and batch[3] == f"busy: 1 of the 1 workers ('{worker}')"
    else:
        assert one[3] == batch[3] is None


def test_arrays_of_any_shape_are_taken_element_by_element(db):
    for w in ("ocr", "thumbs"):
        make_worker(db, w)
    got = db.execute(
        "SELECT worker_name, request FROM scrinalia.enqueue_runs('[0:1]={ocr,thumbs}'::text[],"
        ' ARRAY[ARRAY[\'{"preset": "fast"}\'::jsonb], ARRAY[NULL::jsonb]])'
    ).fetchall()
    assert got == [("ocr", {"preset": "fast"}), ("thumbs", {})]
    with raises_sqlstate("SW001", "enqueue #2 (worker 'nope'): unknown worker 'nope'"):
        db.execute("SELECT scrinalia.enqueue_runs('{{ocr},{nope}}'::text[])")
