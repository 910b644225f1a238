"""The runner's batches (issue 12): a backlog of quick runs is claimed several at a
time and reported together; claimed runs never wait long behind a slow handler, and
a stop gives back the ones not started."""

from __future__ import annotations

import io
import json
import threading

import psycopg
from runner_fakes import RecordingWakeup

from helpers import FlushCountingStream, make_workers, run_row
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner import Runner
from scrinalia_workers.testkit.waiting import wait_for


def _enqueue_all(db, workers):
    return [db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (w,)).fetchone()[0] for w in workers]


def _events(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _statuses(db, ids):
    return dict(
        db.execute(
            "SELECT run_id, status::text FROM scrinalia.archive_worker_runs WHERE run_id = ANY(%s)", (ids,)
        ).fetchall()
    )


def _drain(db, r: Runner, ids: list[int]) -> None:
    """Runs the runner's loop in a thread until every run of ids SUCCEEDED, then stops it."""
    t = threading.Thread(target=r.run_forever)
    t.start()
    try:
        wait_for(lambda: set(_statuses(db, ids).values()) == {"SUCCEEDED"}, 30, what="the backlog drained")
    finally:
        r.request_stop()
        t.join(10)


def test_a_backlog_is_claimed_in_growing_batches(db, db_dsn):
    workers = make_workers(db, 200)
    ids = _enqueue_all(db, workers)
    done = []
    out = io.StringIO()
    r = Runner(
        db_dsn, {"*": lambda run: done.append(run["run_id"])}, log=EventLog(json_lines=True, stream=out), batch=32
    )
    _drain(db, r, ids)
    assert sorted(done) == sorted(ids)
    # one run at a time would be 200 claims; doubling batches (1, 2, 4, .. 32) take about 10
    assert r.claim_attempts <= 20, r.claim_attempts
    finished = [e for e in _events(out) if e["event"] == "finished"]
    assert sorted(e["run_id"] for e in finished) == sorted(ids)
    assert (
        max(
            row[0]
            for row in db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs GROUP BY lease_owner, started_at")
        )
        > 1
    )


def test_batch_one_claims_one_run_at_a_time(db, db_dsn):
    workers = make_workers(db, 12)
    ids = _enqueue_all(db, workers)
    r = Runner(db_dsn, {"*": lambda run: None}, log=EventLog(stream=io.StringIO()), batch=1)
    _drain(db, r, ids)
    assert r.claim_attempts >= len(ids)


def test_runs_held_up_by_a_slow_handler_go_back_to_the_queue_with_one_handler_thread(db, db_dsn):
    workers = make_workers(db, 3)
    ids = _enqueue_all(db, workers)
    release, slow_started = threading.Event(), threading.Event()
    ran = []

    def handler(run):
        ran.append(run["run_id"])
        if run["run_id"] == ids[0]:
            slow_started.set()
            release.wait(20)

    out = io.StringIO()
    r = Runner(db_dsn, {"*": handler}, log=EventLog(json_lines=True, stream=out), concurrency=1)
    t = threading.Thread(target=r.run_batch, args=(3,))
    t.start()
    try:
        assert slow_started.wait(10)
        assert _statuses(db, ids[1:]) == {ids[1]: "RUNNING", ids[2]: "RUNNING"}  # claimed with it
        # the two runs behind the slow one are QUEUED again, for any runner
        wait_for(
            lambda: _statuses(db, ids[1:]) == {ids[1]: "QUEUED", ids[2]: "QUEUED"}, 10, what="the held runs released"
        )
        with psycopg.connect(db_dsn, autocommit=True) as other:
            taken = other.execute("SELECT run_id FROM scrinalia.claim_runs('other', '1 minute', NULL, 10)").fetchall()
        assert sorted(x[0] for x in taken) == ids[1:]
        assert run_row(db, ids[0])["status"] == "RUNNING"
    finally:
        release.set()
        t.join(10)
    assert ran == [ids[0]]  # this runner never ran the runs it gave back
    assert run_row(db, ids[0])["status"] == "SUCCEEDED"
    released = [e for e in _events(out) if e["event"] == "released"]
    assert [e["runs"] for e in released] == [f"{ids[1]},{ids[2]}"]


def test_runs_held_up_by_a_slow_handler_run_on_another_handler_thread(db, db_dsn):
    # with --concurrency above one, the runs behind a slow handler are not given back:
    # a second handler thread takes them up once the first has run release_after
    workers = make_workers(db, 3)
    ids = _enqueue_all(db, workers)
    release, slow_started = threading.Event(), threading.Event()
    threads = {}

    def handler(run):
        threads[run["run_id"]] = threading.get_ident()
        if run["run_id"] == ids[0]:
            slow_started.set()
            release.wait(20)

    out = io.StringIO()
    r = Runner(db_dsn, {"*": handler}, log=EventLog(json_lines=True, stream=out), concurrency=2)
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(runs=r.run_batch(3)))
    t.start()
    try:
        assert slow_started.wait(10)
        wait_for(
            lambda: _statuses(db, ids[1:]) == {ids[1]: "SUCCEEDED", ids[2]: "SUCCEEDED"},
            10,
            what="the runs behind the slow one finished here",
        )
        assert run_row(db, ids[0])["status"] == "RUNNING"
    finally:
        release.set()
        t.join(10)
    assert {run.run_id: run.end for run in result["runs"]} == dict.fromkeys(ids, "SUCCEEDED")
    assert threads[ids[1]] == threads[ids[2]] != threads[ids[0]]
    assert not [e for e in _events(out) if e["event"] == "released"]


def test_a_stop_gives_back_the_unstarted_runs_and_interrupts_the_running_one(db, db_dsn):
    workers = make_workers(db, 3)
    ids = _enqueue_all(db, workers)
    started, never = threading.Event(), threading.Event()

    def handler(run):
        started.set()
        never.wait(30)

    r = Runner(db_dsn, {"*": handler}, log=EventLog(stream=io.StringIO()), grace=0.3)
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(runs=r.run_batch(3)))
    t.start()
    try:
        assert started.wait(10)
        r.request_stop()
        t.join(10)
        assert not t.is_alive()
    finally:
        never.set()
    outcomes = {run.run_id: run.end for run in out["runs"]}
    assert outcomes == {ids[0]: "INTERRUPTED", ids[1]: "RELEASED", ids[2]: "RELEASED"}
    assert _statuses(db, ids) == {ids[0]: "INTERRUPTED", ids[1]: "QUEUED", ids[2]: "QUEUED"}


def test_outcomes_wait_for_the_batch_at_most_briefly(db, db_dsn):
    # the first run's outcome is reported while the second, slower handler still runs
    workers = make_workers(db, 2)
    ids = _enqueue_all(db, workers)
    second = threading.Event()

    def handler(run):
        if run["run_id"] == ids[1]:
            second.wait(20)

    r = Runner(db_dsn, {"*": handler}, log=EventLog(stream=io.StringIO()))
    t = threading.Thread(target=r.run_batch, args=(2,))
    t.start()
    try:
        wait_for(lambda: run_row(db, ids[0])["status"] == "SUCCEEDED", 5, what="the first outcome reported")
        assert run_row(db, ids[1])["status"] == "RUNNING"
    finally:
        second.set()
        t.join(10)
    assert run_row(db, ids[1])["status"] == "SUCCEEDED"


def test_an_instant_python_cannot_hold_does_not_cost_its_batch(db, db_dsn):
    """A run whose not_before was written by hand as -infinity (claimable) used to make
    psycopg raise while it read the claimed batch: every run of the batch stayed RUNNING
    with no handler until its lease ran out. Now the batch runs, that one included."""
    workers = make_workers(db, 5)
    ids = _enqueue_all(db, workers)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET not_before = '-infinity', created_at = '4713-01-01 BC'"
        " WHERE run_id = %s",
        (ids[2],),
    )
    seen = {}
    r = Runner(
        db_dsn,
        {"*": lambda run: seen.update({run["run_id"]: run["not_before"]})},
        log=EventLog(stream=io.StringIO()),
        batch=32,
    )
    claimed = r.run_batch(32)
    assert sorted(x.run_id for x in claimed) == sorted(ids)
    assert _statuses(db, ids) == {i: "SUCCEEDED" for i in ids}
    assert seen[ids[2]].year == 1


def test_a_run_queued_for_ever_neither_errs_nor_slows_an_idle_runner(db, db_dsn):
    """A queued run whose not_before was written by hand as 'infinity' is never
    claimable; next_claimable_at() used to return it, and the idle runner's wait
    (infinity - now()) failed: a 'database error', a reconnect and a growing backoff at
    every idle turn, and new runs waited out the backoff instead of being woken."""
    parked, *workers = make_workers(db, 4)
    _enqueue_all(db, [parked])
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = 'infinity'")
    out = io.StringIO()
    # its stand-by has no timeout here: only a NOTIFY ends it, not an error's backoff
    r = Runner(
        db_dsn, {"*": lambda run: None}, log=EventLog(json_lines=True, stream=out), wakeup=RecordingWakeup(endless=True)
    )
    t = threading.Thread(target=r.run_forever)
    t.start()
    try:
        for w in workers:  # each one enqueued while the runner stands by, woken for
            wait_for(r.wakeup.standing_by.is_set, 10, what="the runner standing by")
            run_id = _enqueue_all(db, [w])[0]
            wait_for(lambda: _statuses(db, [run_id])[run_id] == "SUCCEEDED", 10, what="the new run")
            assert r.wakeup.standbys[-1] is True, (r.wakeup.standbys, out.getvalue())
    finally:
        r.request_stop()
        t.join(10)
    events = _events(out)
    assert [e for e in events if e["event"] in ("database error", "runner error")] == []
    assert (
        db.execute(
            "SELECT status::text FROM scrinalia.archive_worker_runs WHERE worker_name = %s", (parked,)
        ).fetchone()[0]
        == "QUEUED"
    )


def test_a_batch_of_runs_is_logged_with_a_write_per_batch_not_per_line(db, db_dsn):
    """A claimed and a finished line per run; each batch's lines go out together (a
    write to the pipe is a system call, and on 2 busy cores it was a tenth of a quick
    run's cost), right after the claim and right after the report."""
    workers = make_workers(db, 200)
    ids = _enqueue_all(db, workers)
    out = FlushCountingStream()
    r = Runner(db_dsn, {"*": lambda run: None}, log=EventLog(json_lines=True, stream=out), batch=32)
    _drain(db, r, ids)
    lines = [e["event"] for e in _events(out)]
    assert lines.count("claimed") == lines.count("finished") == 200
    # a flush per claim and per report (and the start and stop lines), not one per line
    assert out.flushes <= 2 * r.claim_attempts + 10 < 400, (out.flushes, r.claim_attempts)
