"""Retention that runs itself: the scheduler's pass deletes the finished runs older than
the retention (90 days unless the owner sets another, or turns it off), whole retry
chains only, in small batches that never hold a claim or a tick up, a sweep at most
once an hour (paced by instants the database keeps, moved here as data), with a
`pruned` log line and what status says."""

from __future__ import annotations

import json
import threading
from datetime import UTC

import psycopg
import pytest

from helpers import claim, cli, finish, lock_holding_scheduler, make_worker, put_schedule, raises_sqlstate, tick


def age(db, run_ids, days: int) -> None:
    """Moves runs into the past: the clock is data."""
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = created_at - make_interval(days => %s),"
        " started_at = started_at - make_interval(days => %s),"
        " finished_at = finished_at - make_interval(days => %s) WHERE run_id = ANY (%s)",
        (days, days, days, list(run_ids)),
    )


def manual_run(db, worker: str = "ocr", status: str = "SUCCEEDED") -> int:
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue(%s, '{}', 'CLI')", (worker,)).fetchone()[0]
    got = claim(db, workers=[worker])
    finish(db, run_id, got[1], status, "boom" if status == "FAILED" else None)
    return run_id


def failed_chain(db, worker: str) -> list[int]:
    """A scheduled period that failed all three attempts."""
    put_schedule(db, worker)
    tick(db)
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 minute'"
        " WHERE worker_name = %s",
        (worker,),
    )
    tick(db)
    ids = []
    while True:
        got = claim(db, workers=[worker])
        finish(db, got[0], got[1], "FAILED", "transient")
        ids.append(got[0])
        created = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchall()
        if not created:
            break
        db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (created[0][0],))
    # its schedule far away: the passes below enqueue nothing
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 day' WHERE worker_name = %s",
        (worker,),
    )
    return ids


def existing(db, run_ids) -> set[int]:
    rows = db.execute(
        "SELECT run_id FROM scrinalia.archive_worker_runs WHERE run_id = ANY (%s)", (list(run_ids),)
    ).fetchall()
    return {r for (r,) in rows}


def pruned_lines(s) -> list[dict]:
    return [e for e in s.events() if e["event"] == "pruned"]


def again_in_an_hour(db) -> None:
    """The last sweep moved an hour and a second into the past."""
    db.execute("UPDATE scrinalia.scheduler_chores SET prune_started_at = prune_started_at - interval '3601 seconds'")


def test_the_pass_prunes_old_finished_runs_whole_chains_and_keeps_the_rest(db, db_dsn):
    for w in ("ocr", "chain", "mixed", "busy"):
        make_worker(db, w)
    old, recent = manual_run(db, "ocr"), manual_run(db, "ocr", "FAILED")
    age(db, [old], 91)
    age(db, [recent], 89)
    chain = failed_chain(db, "chain")
    age(db, chain, 100)
    mixed = failed_chain(db, "mixed")
    age(db, mixed[:2], 100)  # its last attempt recent: the chain stays whole
    busy = db.execute("SELECT run_id FROM scrinalia.enqueue('busy')").fetchone()[0]
    claim(db, workers=["busy"])
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '200 days',"
        " started_at = now() - interval '1 minute' WHERE run_id = %s",
        (busy,),
    )
    with lock_holding_scheduler(db_dsn, "retention") as s:
        s.tick()
        assert existing(db, [old, *chain]) == set()
        assert existing(db, [recent, *mixed, busy]) == {recent, *mixed, busy}
        [line] = pruned_lines(s)
        now = db.execute("SELECT now()").fetchone()[0]
        assert line["count"] == 4 and line["finished"] is True
        status = db.execute("SELECT * FROM scrinalia.retention_status()").fetchone()
        assert status[0].days == 90 and status[3] == 4 and status[4] is None
        assert line["cutoff"] == status[2].isoformat() and abs((now - status[2]).days - 90) <= 1


def test_a_sweep_starts_at_most_once_an_hour(db, db_dsn):
    make_worker(db)
    first = manual_run(db)
    age(db, [first], 100)
    with lock_holding_scheduler(db_dsn, "retention") as s:
        s.tick()
        assert existing(db, [first]) == set()
        second = manual_run(db)
        age(db, [second], 100)
        db.execute("UPDATE scrinalia.scheduler_chores SET prune_started_at = prune_started_at - interval '59 minutes'")
        s.tick()
        s.tick()
        assert existing(db, [second]) == {second}
        again_in_an_hour(db)
        s.tick()
        assert existing(db, [second]) == set()
        assert [e["count"] for e in pruned_lines(s)] == [1, 1]


def test_retention_off_removes_nothing_and_the_operator_sets_it(db, db_dsn, connect_as):
    make_worker(db)
    run_id = manual_run(db)
    age(db, [run_id], 400)
    operator = connect_as("operator")
    assert operator.execute("SELECT scrinalia.set_run_retention(NULL)").fetchone()[0] is None
    with raises_sqlstate("SW002", "at least 1 day"):
        operator.execute("SELECT scrinalia.set_run_retention('2 hours')")
    for group in ("reader", "monitor", "runner", "scheduler"):  # the operator's and the owner's only
        with raises_sqlstate("42501"):
            connect_as(group).execute("SELECT scrinalia.set_run_retention('30 days')")
    with lock_holding_scheduler(db_dsn, "retention") as s:
        s.tick()
        assert existing(db, [run_id]) == {run_id} and pruned_lines(s) == []
        assert db.execute("SELECT scrinalia.set_run_retention('365 days')").fetchone()[0].days == 365
        s.tick()
        assert existing(db, [run_id]) == set()


def test_only_the_schedulers_session_prunes(db, connect_as):
    """A group login that may run the scheduler, not holding its lock, is refused; the
    reader and the monitor read what status says, and change nothing."""
    make_worker(db)
    run_id = manual_run(db)
    age(db, [run_id], 100)
    for group in ("scheduler", "operator", "runner"):
        with raises_sqlstate("SW032"):
            connect_as(group).execute("SELECT * FROM scrinalia.prune_expired_runs(1)")
    for group in ("reader", "monitor"):
        with raises_sqlstate("42501"):
            connect_as(group).execute("SELECT * FROM scrinalia.prune_expired_runs(1)")
        [row] = connect_as(group).execute("SELECT retention, pruned_at FROM scrinalia.retention_status()").fetchall()
        assert row[0].days == 90 and row[1] is None
    assert existing(db, [run_id]) == {run_id}


def test_a_runs_rerun_link_goes_with_it(db, db_dsn):
    make_worker(db)
    old, recent = manual_run(db), manual_run(db)
    age(db, [old], 100)
    db.execute("INSERT INTO scrinalia.archive_run_reruns (run_id, rerun_of) VALUES (%s, %s)", (recent, old))
    with lock_holding_scheduler(db_dsn, "retention") as s:
        s.tick()
    assert existing(db, [old, recent]) == {recent}
    assert db.execute("SELECT count(*) FROM scrinalia.archive_run_reruns").fetchone()[0] == 0


def test_a_locked_row_holds_up_neither_the_pass_nor_the_others(db, db_dsn):
    make_worker(db, "held")
    make_worker(db, "free")
    held, free = manual_run(db, "held"), manual_run(db, "free")
    age(db, [held, free], 100)
    with psycopg.connect(db_dsn) as other:  # a session holding the row, for ever
        other.execute("SELECT 1 FROM scrinalia.archive_worker_runs WHERE run_id = %s FOR UPDATE", (held,))
        with lock_holding_scheduler(db_dsn, "retention") as s:
            s.tick()
            assert existing(db, [held, free]) == {held}
            other.rollback()
            again_in_an_hour(db)
            s.tick()
            assert existing(db, [held]) == set()


@pytest.mark.parametrize("work", ["claim", "tick"])
def test_a_claim_or_a_tick_completes_while_a_prune_batch_runs(db, db_dsn, connect_as, work):
    for w in ("old", "live", "sched"):
        make_worker(db, w)
    old = [manual_run(db, "old") for _ in range(5)]
    age(db, old, 100)
    queued = db.execute("SELECT run_id FROM scrinalia.enqueue('live')").fetchone()[0]
    put_schedule(db, "sched")
    tick(db)  # armed
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
    with psycopg.connect(db_dsn) as pruning:  # a batch deleted, its transaction still open
        [(removed,)] = pruning.execute("SELECT removed FROM scrinalia.prune_expired_runs(1)").fetchall()
        assert removed == 5
        # a runner's login claims; the owner's ticks (the tick takes a scheduler's session)
        other = connect_as("runner") if work == "claim" else psycopg.connect(db_dsn, autocommit=True)
        other.execute("SET statement_timeout = '20s'")  # (a failure, not a hang)
        done: list = []

        def work_once() -> None:
            if work == "claim":
                done.append(claim(other, workers=["live"])[0])
            else:
                done.append([d[1] for d in tick(other)[1]])

        t = threading.Thread(target=work_once)
        t.start()
        t.join(30)
        assert done == ([queued] if work == "claim" else [["ENQUEUED"]]), f"the {work} did not complete"
        pruning.commit()
        if work == "tick":
            other.close()
    assert existing(db, old) == set()


def test_status_says_when_it_last_pruned(db, db_dsn):
    make_worker(db)
    run_id = manual_run(db)
    age(db, [run_id], 100)
    r = cli("status", dsn=db_dsn)
    assert r.code == 0 and "retention: 90 days; never pruned yet" in r.out
    with lock_holding_scheduler(db_dsn, "retention") as s:
        s.tick()
    pruned_at, cutoff = (
        t.astimezone(UTC)
        for t in db.execute("SELECT pruned_at, pruned_cutoff FROM scrinalia.scheduler_chores").fetchone()
    )
    r = cli("status", dsn=db_dsn)
    assert f"retention: 90 days; last pruned {pruned_at:%Y-%m-%d %H:%M:%SZ}: 1 run(s) finished before" in r.out
    assert f"finished before {cutoff:%Y-%m-%d %H:%M:%SZ}" in r.out
    r = cli("status", "--json", dsn=db_dsn)
    assert r.code == 0
    kept = json.loads(r.out)["retention"]
    assert kept["retention"] == 90 * 86400 and kept["pruned_runs"] == 1 and kept["sweep_cutoff"] is None
    assert kept["pruned_at"] == pruned_at.isoformat() and kept["pruned_cutoff"] == cutoff.isoformat()
    db.execute("SELECT scrinalia.set_run_retention(NULL)")
    r = cli("status", dsn=db_dsn)
    assert "retention: off (scrinalia.set_run_retention" in r.out


def test_a_failing_chore_is_a_line_and_the_ticks_go_on(db, db_dsn):
    """Both chores failing at every pass (their row refuses every write): one error line
    each, the pass ends normally and its due schedule is enqueued all the same."""
    make_worker(db)
    old = manual_run(db)
    age(db, [old], 100)
    db.execute(
        "CREATE FUNCTION public.refuse_chores() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'chores refused'; END $$"
    )
    db.execute(
        "CREATE TRIGGER refuse BEFORE UPDATE ON scrinalia.scheduler_chores"
        " FOR EACH ROW EXECUTE FUNCTION public.refuse_chores()"
    )
    put_schedule(db, "ocr")
    with lock_holding_scheduler(db_dsn, "retention") as s:
        s.tick()  # arms
        db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
        s.tick()
        failed = [(e["chore"], e["reason"]) for e in s.events() if e["event"] == "chore failed"]
        assert failed == [("retention", "chores refused"), ("alerts", "chores refused")] * 2
        assert [e["worker"] for e in s.events() if e["event"] == "enqueued"] == ["ocr"]
        assert existing(db, [old]) == {old}


def old_runs(db, count: int) -> list[int]:
    """Runs finished 100 days ago, written at once (as a restore would)."""
    make_worker(db, "bulk")
    return [
        r
        for (r,) in db.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, created_at, started_at,"
            " finished_at) SELECT 'bulk', 'MANUAL', 'SUCCEEDED', now() - interval '100 days',"
            " now() - interval '100 days', now() - interval '100 days' FROM generate_series(1, %s)"
            " RETURNING run_id",
            (count,),
        ).fetchall()
    ]


def test_a_batch_reads_a_stretch_of_the_ledger_and_a_due_schedule_goes_first(db):
    """A batch deletes what begins in its stretch of retention_batch() runs, and the
    next one goes on from there; with a schedule due, the pass is told to stop pruning."""
    stretch = db.execute("SELECT scrinalia.retention_batch()").fetchone()[0]
    ids = old_runs(db, 2 * stretch + 7)
    first = db.execute("SELECT removed, more, finished FROM scrinalia.prune_expired_runs(1)").fetchone()
    assert first == (stretch, True, False)
    assert existing(db, ids) == set(ids[stretch:])
    put_schedule(db, "bulk")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
    second = db.execute("SELECT removed, more, finished FROM scrinalia.prune_expired_runs(2)").fetchone()
    assert second == (stretch, False, False)  # a tick is due: no more this pass
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 day'")
    last = db.execute("SELECT removed, more, finished, sweep_removed FROM scrinalia.prune_expired_runs(1)").fetchone()
    assert last == (7, False, True, 2 * stretch + 7)
    assert existing(db, ids) == set()


def test_a_sweep_ends_at_the_first_run_created_after_its_cutoff(db):
    """Runs created after the cut-off finished after it: the sweep stops there rather
    than read the rest of the ledger."""
    make_worker(db)
    recent = manual_run(db)
    [old] = old_runs(db, 1)  # (written after it, its instants by hand)
    row = db.execute("SELECT removed, more, finished FROM scrinalia.prune_expired_runs(1)").fetchone()
    assert row == (0, False, True) and existing(db, [recent, old]) == {recent, old}


def test_a_session_holding_the_chores_row_holds_no_tick_up(db, db_dsn):
    """The chores wait at most chore_lock_timeout() for their row, then fail alone: the
    pass's due schedule is enqueued, nothing is pruned, and the next pass tries again."""
    make_worker(db)
    old = manual_run(db)
    age(db, [old], 100)
    put_schedule(db, "ocr")
    tick(db)  # armed
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
    with psycopg.connect(db_dsn) as holder, lock_holding_scheduler(db_dsn, "retention") as s:
        holder.execute("SELECT 1 FROM scrinalia.scheduler_chores FOR UPDATE")
        s.tick()
        failed = [(e["chore"], e["sqlstate"]) for e in s.events() if e["event"] == "chore failed"]
        assert failed == [("retention", "55P03"), ("alerts", "55P03")]
        assert [e["worker"] for e in s.events() if e["event"] == "enqueued"] == ["ocr"]
        assert existing(db, [old]) == {old}
        holder.rollback()
        s.tick()
        assert existing(db, [old]) == set() and [e["count"] for e in pruned_lines(s)] == [1]
