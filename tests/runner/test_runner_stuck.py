"""A handler that never returns holds up only its own thread: the runner goes on
claiming and finishing other workers' runs on the others, tells a handler whose run
must stop (lease lost: cancelled, past its maximum run time, reaped), and when every
thread is held by such a run past --grace, says so and exits 3 for its supervisor.

The batch's timing is driven by a fake clock (as in test_run_states.py); the runner's
threads and the process's exit code are real."""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta

import pytest
from runner_fakes import FakeLedger, ScriptedWakeup, SteppedHandlers, StopFlag, claimed

from helpers import make_worker, run_row, scheduled_run
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner import Runner, context
from scrinalia_workers.runner.batch import Batch, HandlersStuck, Supervision, heartbeat_interval
from scrinalia_workers.runner.run_states import RunState
from scrinalia_workers.testkit.clock import FakeClock
from scrinalia_workers.testkit.waiting import wait_for

T0 = 1000.0


def _rig(lost: set[int], grace: float, threads: int = 1) -> tuple[Batch, SteppedHandlers, io.StringIO, FakeClock]:
    clock = FakeClock(T0)
    wakeup = ScriptedWakeup(clock)
    handlers = SteppedHandlers(wakeup, clock, max_threads=threads)
    out = io.StringIO()
    sup = Supervision(
        handlers=handlers,
        ledger=FakeLedger(clock, lost_at_heartbeat=lost),
        wakeup=wakeup,
        clock=clock,
        log=EventLog(json_lines=True, stream=out),
        lease=30.0,
        grace=5.0 if grace is None else grace,
        stopping=StopFlag(),
    )
    batch = Batch([claimed(1)], sup)
    batch.hand([None])
    wakeup.at(T0, handlers.start)
    return batch, handlers, out, clock


def test_every_thread_held_by_a_run_told_to_stop_ends_the_runner_after_the_grace():
    batch, _, out, clock = _rig(lost={1}, grace=5.0)
    with pytest.raises(HandlersStuck, match="runs 1 were told to stop and did not return within 5.0 s"):
        batch.see_through()
    told = T0 + heartbeat_interval(30.0)  # the heartbeat that found the lease lost
    assert clock.monotonic() == pytest.approx(told + 5.0)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    stuck = [e for e in events if e["event"] == "handlers stuck"]
    assert len(stuck) == 1 and stuck[0]["runs"] == "1" and stuck[0]["level"] == "error"
    assert batch.runs[1].stop.is_set() and batch.runs[1].stop.reason.startswith("lease lost: ")
    # said in the database once, when it began: the run, the threads, the time left
    assert batch.sup.ledger.stalls == [(told, [1], 1, 5.0)]  # type: ignore[attr-defined]


def test_a_told_handler_that_returns_within_the_grace_ends_nothing():
    batch, handlers, out, clock = _rig(lost={1}, grace=5.0)
    handlers._wakeup.at(T0 + heartbeat_interval(30.0) + 4.0, handlers.finish)  # type: ignore[attr-defined]
    batch.see_through()
    assert batch.runs[1].state is RunState.LEASE_LOST
    assert "handlers stuck" in out.getvalue()  # said while it was, and no exit
    # the stall said in the database, then said over once the handler returned
    stalls = batch.sup.ledger.stalls  # type: ignore[attr-defined]
    assert [s[1] for s in stalls] == [[1], None]


def test_a_told_run_with_another_thread_free_is_not_stuck():
    batch, _, out, _ = _rig(lost={1}, grace=5.0, threads=2)
    batch.sup.may_claim = lambda b: b.sup.clock.monotonic() >= T0 + 60  # the runner's look, a minute on
    batch.sup.wake_by = lambda: T0 + 60
    batch.see_through()  # returns to claim: nothing raised
    assert batch.runs[1].state is RunState.LOST and "handlers stuck" not in out.getvalue()
    assert batch.sup.ledger.stalls == []  # type: ignore[attr-defined]


def test_a_thread_held_by_a_run_of_a_dropped_batch_counts_as_stuck():
    """The runner drops its batch after a database error while a handler runs (its lease
    then runs out): a handler that never returns still holds the thread, batch after
    batch, and ends the runner after the grace like a lost run's."""
    batch, handlers, out, clock = _rig(lost=set(), grace=5.0)
    batch.sup.wake_by = lambda: None
    handlers._wakeup._events.clear()  # type: ignore[attr-defined]  # (the rig's start: stepped here)
    assert handlers.start() == 1  # run 1's handler runs, and never returns
    batch.sup.orphans[1] = clock.monotonic()  # Runner._give_back
    later = []
    for run_id in (2, 3, 4):
        b = Batch([claimed(run_id)], batch.sup)
        b.hand([None])
        later.append(b)
        try:
            b.see_through()  # behind the held thread: given back after release_after
        except HandlersStuck as e:
            assert "runs 1 were told to stop and did not return within 5.0 s" in str(e)
            break
        assert b.runs[run_id].state is RunState.RELEASED
        clock.advance(3.0)  # the runner's next claim
    else:
        pytest.fail("the runner never said its only thread was stuck")
    stuck = [json.loads(line) for line in out.getvalue().splitlines() if '"handlers stuck"' in line]
    assert stuck and stuck[0]["runs"] == "1"


# -- the real runner ----------------------------------------------------------------------


def _forever(r: Runner) -> threading.Thread:
    t = threading.Thread(target=r.run_forever, daemon=True)
    t.start()
    return t


def test_a_hung_handler_holds_up_only_its_thread(db, db_dsn):
    make_worker(db, "hung")
    make_worker(db, "ok")
    hung = scheduled_run(db, "hung")
    release = threading.Event()
    done: list[int] = []

    def hang(run):
        release.wait(60)

    def ok(run):
        done.append(run["run_id"])

    out = io.StringIO()
    r = Runner(db_dsn, {"hung": hang, "ok": ok}, lease=timedelta(seconds=30), concurrency=2, log=EventLog(stream=out))
    t = _forever(r)
    try:
        wait_for(lambda: run_row(db, hung)["status"] == "RUNNING", timeout=15, what="the hung run claimed")
        others = [scheduled_run(db, "ok") for _ in range(1)]
        wait_for(lambda: run_row(db, others[0])["status"] == "SUCCEEDED", timeout=20, what="another worker's run done")
        assert run_row(db, hung)["status"] == "RUNNING"  # still held, still heartbeated
        again = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
        wait_for(lambda: run_row(db, again)["status"] == "SUCCEEDED", timeout=20, what="the next one too")
        assert done == [others[0], again]
    finally:
        r.request_stop()
        release.set()
        t.join(30)
        r.close()
    assert not t.is_alive()
    assert run_row(db, hung)["status"] == "SUCCEEDED"  # released, it finished and was reported


def test_a_handler_is_told_why_its_run_must_stop(db, db_dsn):
    make_worker(db, "polite")
    run_id = scheduled_run(db, "polite")
    told: list[str | None] = []
    started = threading.Event()

    def polite(run):
        started.set()
        while not context.sleep(0.02):
            pass
        told.append(context.stop_reason())
        context.check()  # raises RunStopped: what it does now counts for nothing

    r = Runner(db_dsn, {"polite": polite}, lease=timedelta(seconds=3), log=EventLog(stream=io.StringIO()))
    t = _forever(r)
    try:
        assert started.wait(15)
        db.execute(
            "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
            (run_id,),
        )
        assert [x[0] for x in db.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")] == [run_id]
        wait_for(lambda: told, timeout=15, what="the handler told")
    finally:
        r.request_stop()
        t.join(30)
        r.close()
    assert told[0] is not None and told[0].startswith("lease lost: ")
    row = run_row(db, run_id)
    assert row["status"] == "INTERRUPTED" and row["error_fingerprint"] == "lease-expired"  # the reaper's, untouched


def test_outside_a_runner_a_run_never_has_to_stop():
    assert context.stop_reason() is None and not context.should_stop()
    context.check()
    assert context.sleep(0) is False


@pytest.mark.slow
def test_a_runner_whose_every_thread_is_stuck_exits_3_with_one_line(db, db_dsn, procs):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    p = procs.runner(db_dsn, "demo_handlers", "--concurrency", "1", "--lease", "3", "--grace", "1")
    p.wait_event("claimed", run_id=run_id)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    db.execute("SELECT scrinalia.reap_expired_leases()")
    p.wait_event("handlers stuck", runs=str(run_id))
    assert p.popen.wait(60) == 3
    exits = [e for e in p.events if e["event"] == "exiting"]
    assert len(exits) == 1 and f"runs {run_id} were told to stop" in exits[0]["reason"]
    # what an operator's stack reads says it too, after the exit: the alert with the run
    # and the worker, and the exporter's gauges (no runner id for the monitor login)
    alerts = db.execute(
        "SELECT run_ids, message FROM scrinalia.current_alerts() WHERE kind = 'RUNNER_STUCK'"
    ).fetchall()
    assert len(alerts) == 1 and alerts[0][0] == [run_id], alerts
    assert " exited at " in alerts[0][1] and "of hang" in alerts[0][1] and "context.check()" in alerts[0][1]
    metrics = db.execute("SELECT * FROM scrinalia.runner_stall_metrics()").fetchone()
    assert tuple(metrics) == (0, 0, 1)
