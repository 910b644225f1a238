"""The batch forms of the queue (issue 12): claim_runs, heartbeat_runs, finish_runs,
release_runs. Same rules as the one-run calls: fenced leases, one slot per worker,
not_before, SKIP LOCKED; a lost lease is answered per run, not raised."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from helpers import make_workers, nested_plans, raises_sqlstate, run_row, scheduled_run

CLAIM = "SELECT run_id, lease_token, worker_name FROM scrinalia.claim_runs(%s, %s::interval, %s, %s)"
FINISH = (
    "SELECT run_id, status::text, retry_pending, lost_reason FROM scrinalia.finish_runs("
    "%s, %s, %s::scrinalia.run_status[], %s, %s)"
)


def _enqueue_all(db, workers):
    return [db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (w,)).fetchone()[0] for w in workers]


def _claim(conn, limit, runner="r1", lease="5 minutes", workers=None):
    return conn.execute(CLAIM, (runner, lease, workers, limit)).fetchall()


def test_claim_runs_takes_the_oldest_claimable_up_to_the_limit(db):
    workers = make_workers(db, 6)
    ids = _enqueue_all(db, workers)
    # a retry in its backoff is not claimable yet
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET not_before = now() + interval '1 hour' WHERE run_id = %s", (ids[1],)
    )
    got = _claim(db, 3)
    assert [r[0] for r in got] == [ids[0], ids[2], ids[3]]
    assert len({r[1] for r in got}) == 3  # a lease token each
    for run_id, token, _ in got:
        row = run_row(db, run_id)
        assert (row["status"], row["lease_owner"], row["lease_token"]) == ("RUNNING", "r1", token)
    assert [r[0] for r in _claim(db, 10)] == [ids[4], ids[5]]
    assert _claim(db, 10) == []


def test_claim_runs_among_named_workers(db):
    workers = make_workers(db, 4)
    ids = _enqueue_all(db, workers)
    got = _claim(db, 10, workers=[workers[3], workers[1]])
    assert sorted(r[0] for r in got) == [ids[1], ids[3]]


def test_concurrent_batch_claims_never_share_a_run(db, db_dsn):
    workers = make_workers(db, 400)
    ids = _enqueue_all(db, workers)
    seen: list[list[int]] = []
    barrier = threading.Barrier(4)

    def runner(i):
        mine = []
        with psycopg.connect(db_dsn, autocommit=True) as c:
            barrier.wait()
            while rows := _claim(c, 7, runner=f"r{i}"):
                mine += [r[0] for r in rows]
        seen.append(mine)

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [run_id for mine in seen for run_id in mine]
    assert sorted(claimed) == sorted(ids)  # every run once, none twice


@pytest.mark.parametrize("limit", [0, -1, 1001, None])
def test_claim_runs_refuses_a_bad_limit(db, limit):
    with raises_sqlstate("SW022", "claim limit"):
        _claim(db, limit)


def test_finish_runs_reports_each_outcome_in_one_call(db):
    workers = make_workers(db, 3)
    _enqueue_all(db, workers)
    got = _claim(db, 3)
    ids, tokens = [r[0] for r in got], [r[1] for r in got]
    rows = db.execute(
        FINISH,
        (
            ids,
            tokens,
            ["SUCCEEDED", "FAILED", "INTERRUPTED"],
            [None, "disk full on /srv 3", None],
            [None, None, "my-fp"],
        ),
    ).fetchall()
    assert [(r[0], r[1], r[3]) for r in rows] == [
        (ids[0], "SUCCEEDED", None),
        (ids[1], "FAILED", None),
        (ids[2], "INTERRUPTED", None),
    ]
    ok, failed, interrupted = (run_row(db, i) for i in ids)
    assert ok["error"] is None and ok["lease_token"] is None and ok["finished_at"] is not None
    assert failed["error"] == "disk full on /srv 3"
    # the same default fingerprint as finish(): digits masked
    same = db.execute("SELECT md5(regexp_replace('disk full on /srv 3', '[0-9]+', 'N', 'g'))").fetchone()[0]
    assert failed["error_fingerprint"] == same
    assert (interrupted["error"], interrupted["error_fingerprint"]) == ("interrupted without an error text", "my-fp")
    # MANUAL runs never owe a retry
    assert [r[2] for r in rows] == [False, False, False]


def test_finish_runs_marks_owed_retries_and_wakes_the_scheduler(db, db_dsn):
    (w,) = make_workers(db, 1)
    run_id = scheduled_run(db, w)
    (claimed,) = _claim(db, 1)
    assert claimed[0] == run_id
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_scheduler")
        rows = db.execute(FINISH, ([run_id], [claimed[1]], ["FAILED"], ["boom"], None)).fetchall()
        assert rows[0][1:] == ("FAILED", True, None)
        notes = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert notes == ["retry"]
    assert run_row(db, run_id)["retry_pending"] is True


def test_a_lost_lease_is_answered_and_the_other_outcomes_land(db):
    workers = make_workers(db, 4)
    _enqueue_all(db, workers)
    got = _claim(db, 4)
    ids, tokens = [r[0] for r in got], [r[1] for r in got]
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (ids[1],),
    )
    db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (ids[2], tokens[2]))
    wrong = [tokens[0], tokens[1], tokens[2], uuid.uuid4()]
    rows = {r[0]: r for r in db.execute(FINISH, (ids, wrong, ["SUCCEEDED"] * 4, None, None)).fetchall()}
    assert rows[ids[0]][1:] == ("SUCCEEDED", False, None)
    assert rows[ids[1]][1] is None and rows[ids[1]][3].startswith("the lease expired at")
    assert rows[ids[2]][1] is None and rows[ids[2]][3] == "the run is SUCCEEDED"
    assert rows[ids[3]][1] is None and rows[ids[3]][3] == "another lease holds it"
    assert run_row(db, ids[0])["status"] == "SUCCEEDED"
    assert run_row(db, ids[1])["status"] == "RUNNING"  # the reaper's, not ours
    assert run_row(db, ids[3])["status"] == "RUNNING"
    missing = db.execute(FINISH, ([10**12], [uuid.uuid4()], ["SUCCEEDED"], None, None)).fetchone()
    assert missing[3] == "no such run"


def test_finish_one_run_still_raises_sw020_with_the_reason(db):
    (w,) = make_workers(db, 1)
    _enqueue_all(db, [w])
    ((run_id, token, _),) = _claim(db, 1)
    with raises_sqlstate("SW020", f"lease lost for run #{run_id}: another lease holds it"):
        db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, uuid.uuid4()))
    db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, token))
    with raises_sqlstate("SW020", "the run is SUCCEEDED"):
        db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, token))


def test_the_one_run_forms_record_what_the_batch_forms_record(db, db_dsn):
    workers = make_workers(db, 2)
    singles, batched = (scheduled_run(db, w) for w in workers)
    got = {r[0]: r[1] for r in _claim(db, 2)}
    assert set(got) == {singles, batched}
    before = run_row(db, singles)["lease_expires_at"]
    assert db.execute("SELECT scrinalia.heartbeat(%s, %s)", (singles, got[singles])).fetchone()[0] >= before
    db.execute("SELECT * FROM scrinalia.heartbeat_runs(%s, %s)", ([batched], [got[batched]]))
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_scheduler")
        row = db.execute(
            "SELECT run_id, status::text, retry_pending FROM scrinalia.finish(%s, %s, 'FAILED', 'disk 3 full')",
            (singles, got[singles]),
        ).fetchone()
        assert row == (singles, "FAILED", True)  # the finished row is returned
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["retry"]
    db.execute(FINISH, ([batched], [got[batched]], ["FAILED"], ["disk 3 full"], None))
    one, other = run_row(db, singles), run_row(db, batched)
    for column in ("status", "error", "error_fingerprint", "retry_pending", "lease_token", "lease_expires_at"):
        assert one[column] == other[column], column
    assert one["duration"] is not None and one["heartbeat_at"] is not None


@pytest.mark.parametrize(
    "sql, sqlstate, fragments",
    [
        # a NULL run id is a lease nobody holds (SW020), not malformed batch arrays (SW022)
        ("SELECT scrinalia.heartbeat(NULL, gen_random_uuid())", "SW020", ("lease lost for run #: no such run",)),
        ("SELECT scrinalia.finish(NULL, gen_random_uuid(), 'SUCCEEDED')", "SW020", ("lease lost", "no such run")),
        ("SELECT scrinalia.heartbeat(1000000000000, NULL)", "SW020", ("run #1000000000000: no such run",)),
        # the status is checked before the lease
        ("SELECT scrinalia.finish(NULL, gen_random_uuid(), 'CANCELLED')", "SW021", ("not CANCELLED",)),
        ("SELECT scrinalia.finish(1000000000000, gen_random_uuid(), NULL)", "SW021", ("not NULL",)),
    ],
)
def test_the_one_run_forms_keep_their_errors(db, sql, sqlstate, fragments):
    with raises_sqlstate(sqlstate, *fragments):
        db.execute(sql)


@pytest.mark.parametrize("statuses", [["CANCELLED"], ["QUEUED"], ["RUNNING"], [None]])
def test_finish_runs_takes_only_the_runner_statuses(db, statuses):
    (w,) = make_workers(db, 1)
    _enqueue_all(db, [w])
    ((run_id, token, _),) = _claim(db, 1)
    with raises_sqlstate("SW021"):
        db.execute(FINISH, ([run_id], [token], statuses, None, None))
    assert run_row(db, run_id)["status"] == "RUNNING"


@pytest.mark.parametrize(
    "ids, tokens, statuses",
    [
        ([1, 2], [uuid.uuid4()], ["SUCCEEDED", "SUCCEEDED"]),  # tokens short
        ([1, 2], [uuid.uuid4(), uuid.uuid4()], ["SUCCEEDED"]),  # statuses short
        ([1, 1], [uuid.uuid4(), uuid.uuid4()], ["SUCCEEDED"] * 2),  # a run twice
        ([1, None], [uuid.uuid4(), uuid.uuid4()], ["SUCCEEDED"] * 2),  # a NULL run id
        (None, None, None),
    ],
)
def test_finish_runs_refuses_malformed_arrays(db, ids, tokens, statuses):
    with raises_sqlstate("SW022"):
        db.execute(FINISH, (ids, tokens, statuses, None, None))


def test_finish_runs_refuses_errors_of_another_length(db):
    with raises_sqlstate("SW022"):
        db.execute(FINISH, ([1], [uuid.uuid4()], ["FAILED"], ["a", "b"], None))


def test_heartbeat_runs_extends_live_leases_and_answers_lost_ones(db):
    workers = make_workers(db, 3)
    _enqueue_all(db, workers)
    got = _claim(db, 3, lease="10 seconds")
    ids, tokens = [r[0] for r in got], [r[1] for r in got]
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() + interval '1 second' "
        "WHERE run_id = ANY(%s)",
        (ids,),
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (ids[2],),
    )
    rows = db.execute(
        "SELECT run_id, lease_expires_at - now(), lost_reason FROM scrinalia.heartbeat_runs(%s, %s)",
        (ids, [tokens[0], uuid.uuid4(), tokens[2]]),
    ).fetchall()
    assert rows[0][0] == ids[0] and rows[0][1].total_seconds() == pytest.approx(10, abs=0.5) and rows[0][2] is None
    assert rows[1][1] is None and rows[1][2] == "another lease holds it"
    assert rows[2][1] is None and rows[2][2].startswith("the lease expired at")


def test_release_runs_gives_unstarted_runs_back_to_the_queue(db, db_dsn):
    workers = make_workers(db, 3)
    ids = _enqueue_all(db, workers)
    got = _claim(db, 3, runner="greedy")
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_runs")
        released = db.execute(
            "SELECT run_id FROM scrinalia.release_runs(%s, %s)", ([got[1][0], got[2][0]], [got[1][1], uuid.uuid4()])
        ).fetchall()
        assert [n.channel for n in listener.notifies(timeout=2, stop_after=1)] == ["scrinalia_runs"]
    assert released == [(got[1][0],)]  # the wrong token's run stays where it is
    row = run_row(db, ids[1])
    assert (row["status"], row["lease_owner"], row["lease_token"], row["lease_expires_at"], row["started_at"]) == (
        "QUEUED",
        None,
        None,
        None,
        None,
    )
    assert run_row(db, ids[2])["status"] == "RUNNING"
    # another runner takes it; the old token can no longer finish it
    (again,) = _claim(db, 10, runner="other")
    assert again[0] == ids[1]
    lost = db.execute(FINISH, ([ids[1]], [got[1][1]], ["SUCCEEDED"], None, None)).fetchone()
    assert lost[3] == "another lease holds it"
    # the slot stayed taken throughout: no second run for the worker
    with raises_sqlstate("SW010"):
        db.execute("SELECT scrinalia.enqueue(%s)", (workers[1],))


def test_the_runner_group_may_call_the_batch_forms_and_the_reader_may_not(db, connect_as):
    workers = make_workers(db, 2)
    _enqueue_all(db, workers)
    runner = connect_as("runner")
    got = _claim(runner, 2)
    assert len(got) == 2
    runner.execute("SELECT * FROM scrinalia.heartbeat_runs(%s, %s)", ([got[0][0]], [got[0][1]]))
    runner.execute("SELECT * FROM scrinalia.release_runs(%s, %s)", ([got[1][0]], [got[1][1]]))
    runner.execute(FINISH, ([got[0][0]], [got[0][1]], ["SUCCEEDED"], None, None))
    reader = connect_as("reader")
    for sql, args in [
        (CLAIM, ("r", "1 minute", None, 1)),
        (FINISH, ([1], [uuid.uuid4()], ["SUCCEEDED"], None, None)),
        ("SELECT * FROM scrinalia.release_runs(%s, %s)", ([1], [uuid.uuid4()])),
    ]:
        with raises_sqlstate("42501"):
            reader.execute(sql, args)


def test_batch_calls_find_their_runs_by_id_whatever_the_statistics(db):
    """The lease calls (heartbeat, finish, release; one run or a batch) reach their runs by run_id even when
    the statistics, taken before anything ran, count few running runs: the partial lease
    index holds every running run, and going through it makes each batch cost them all
    (3.3 ms against 1.1 ms for 32 runs beside 10,000 running)."""
    workers = make_workers(db, 1000)
    # a history, and statistics taken while nothing ran
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, status, trigger, started_at, finished_at,"
        " requested_by) SELECT w, 'SUCCEEDED', 'MANUAL', now(), now(), 'test'"
        " FROM unnest(%s::text[]) w, generate_series(1, 20) g",
        (workers,),
    )
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    _enqueue_all(db, workers)
    _claim(db, 900, runner="others")  # another runner's 900 runs
    mine = _claim(db, 32)
    ids, tokens = [r[0] for r in mine], [r[1] for r in mine]
    plans = nested_plans(db)
    beats = db.execute("SELECT lost_reason FROM scrinalia.heartbeat_runs(%s, %s)", (ids, tokens)).fetchall()
    assert db.execute("SELECT scrinalia.heartbeat(%s, %s)", (ids[0], tokens[0])).fetchone()[0] is not None
    assert (
        db.execute("SELECT (scrinalia.finish(%s, %s, 'SUCCEEDED')).status::text", (ids[0], tokens[0])).fetchone()[0]
        == "SUCCEEDED"
    )
    done = db.execute(FINISH, (ids[1:16], tokens[1:16], ["SUCCEEDED"] * 15, None, None)).fetchall()
    released = db.execute("SELECT run_id FROM scrinalia.release_runs(%s, %s)", (ids[16:], tokens[16:])).fetchall()
    assert [b[0] for b in beats] == [None] * 32 and [d[3] for d in done] == [None] * 15
    assert sorted(r[0] for r in released) == sorted(ids[16:])
    updates = [p for p in plans if "UPDATE scrinalia.archive_worker_runs" in p]
    assert len(updates) == 5, plans
    for plan in updates:
        assert "archive_worker_runs_pkey" in plan and "ix_worker_runs_running_lease" not in plan, plan


def test_one_run_calls_in_a_session_do_not_turn_its_batches_quadratic(db):
    # statistics taken while every run was QUEUED say that none runs: a plan trusting
    # them scans the runs first and joins each to every run of the batch
    workers = make_workers(db, 600)
    _enqueue_all(db, workers)
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    got = _claim(db, 600)
    ids, tokens = [r[0] for r in got], [r[1] for r in got]
    for run_id, token in zip(ids[:10], tokens[:10]):  # the one-run forms share the batch plans
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
        db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, token))
    plans = nested_plans(db, analyze=True)
    for size in (50, 500):
        batch, batch_tokens = ids[10 : 10 + size], tokens[10 : 10 + size]
        beats = db.execute("SELECT lost_reason FROM scrinalia.heartbeat_runs(%s, %s)", (batch, batch_tokens)).fetchall()
        done = db.execute(FINISH, (batch, batch_tokens, ["SUCCEEDED"] * size, None, None)).fetchall()
        assert [b[0] for b in beats] == [None] * size and [d[3] for d in done] == [None] * size
        ids, tokens = ids[size:], tokens[size:]
    updates = [p for p in plans if "UPDATE scrinalia.archive_worker_runs" in p]
    assert len(updates) == 4, plans
    for plan in updates:
        # each run of the batch found once, by its primary key
        assert "Index Scan using archive_worker_runs_pkey" in plan and "Seq Scan on archive_worker_runs" not in plan
        assert "Rows Removed by Join Filter" not in plan, plan
