"""Each claimed run's life in the runner (runner/run_states.py) and the batch loop's
timing decisions (runner/batch.py): when runs are released, heartbeated, reported,
interrupted. No database and no waiting: a FakeClock, the handler thread stepped by
the test, and a fake ledger that records when each call was made."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest
from runner_fakes import OK, FakeLedger, ScriptedWakeup, SteppedHandlers, StopFlag, claimed

from scrinalia_workers.errors import DatabaseUnavailable
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner.batch import (
    SHUTDOWN_ERROR,
    SHUTDOWN_FINGERPRINT,
    Batch,
    Supervision,
    heartbeat_interval,
)
from scrinalia_workers.runner.daemon import idle_delay, next_batch_size
from scrinalia_workers.runner.handlers import Outcome
from scrinalia_workers.runner.ledger import Ledger
from scrinalia_workers.runner.run import ClaimedRun, Reported
from scrinalia_workers.runner.run_states import TRANSITIONS, IllegalMove, RunState
from scrinalia_workers.runner.settings import DEFAULTS, RunnerSettings
from scrinalia_workers.testkit.clock import FakeClock

T0 = 1000.0  # the FakeClock's start
FAILED = Outcome("FAILED", "RuntimeError: boom", "0123456789abcdef")


class Rig:
    """A batch of `n` runs (ids 1..n) handed to a stepped handler thread at T0."""

    def __init__(self, n: int, *, lease: float = 30.0, grace: float = 5.0, settings: RunnerSettings = DEFAULTS):
        self.clock = FakeClock(T0)
        self.wakeup = ScriptedWakeup(self.clock)
        self.handlers = SteppedHandlers(self.wakeup, self.clock)
        self.ledger = FakeLedger(self.clock)
        self.stop = StopFlag()
        self.out = io.StringIO()
        sup = Supervision(
            handlers=self.handlers,
            ledger=self.ledger,
            wakeup=self.wakeup,
            clock=self.clock,
            log=EventLog(json_lines=True, stream=self.out),
            lease=lease,
            grace=grace,
            stopping=self.stop,
            settings=settings,
        )
        self.runs = [claimed(i) for i in range(1, n + 1)]
        self.batch = Batch(self.runs, sup)
        self.batch.hand([None] * n)

    def at(self, seconds: float, *steps: str, outcome: Outcome = OK) -> None:
        """At T0 + seconds: "finish" the running handler, "start" the next, "stop" the runner."""

        def act() -> None:
            for step in steps:
                if step == "finish":
                    self.handlers.finish(outcome)
                elif step == "start":
                    self.handlers.start()
                elif step == "stop":
                    self.stop.set = True
                    self.wakeup.ring()

        self.wakeup.at(T0 + seconds, act)

    def see_through(self) -> float:
        """Runs the batch loop to its end; the seconds it took on the fake clock."""
        self.batch.see_through()
        return self.clock.monotonic() - T0

    def outcomes(self) -> dict[int, str]:
        return {r.run_id: r.end for r in self.runs}

    def states(self) -> dict[int, RunState]:
        return {run_id: run.state for run_id, run in self.batch.runs.items()}

    def events(self, name: str) -> list[dict]:
        return [e for e in map(json.loads, self.out.getvalue().splitlines()) if e["event"] == name]

    def reported(self) -> list[tuple[float, list[int]]]:
        """(seconds after T0, run ids) of each report."""
        return [(round(at - T0, 6), [i for i, _ in items]) for at, items, _ in self.ledger.reports]


# -- the states and their moves ---------------------------------------------------------


def test_every_move_not_written_down_is_refused():
    for src in RunState:
        for dst in RunState:
            life = claimed(7)
            life.state, life.outcome, life.done_at = src, OK, 0.0  # (as if it had got there)
            if dst in TRANSITIONS[src]:
                life.move(dst, outcome=OK, at=0.0)
                assert life.state is dst
            else:
                with pytest.raises(IllegalMove, match=f"{src.name} -> {dst.name}"):
                    life.move(dst)
                assert life.state is src


def test_the_ends_are_final_and_the_others_are_not():
    ends = {RunState.REPORTED, RunState.RELEASED, RunState.LEASE_LOST, RunState.UNREPORTED}
    assert {s for s in RunState if s.final} == ends
    # every state but CLAIMED is reachable, and every state can reach an end
    reachable = {dst for moves in TRANSITIONS.values() for dst in moves}
    assert reachable == set(RunState) - {RunState.CLAIMED}


def test_an_end_says_how_the_run_left_and_the_claimed_row_is_left_as_it_came():
    life = claimed(3)
    row = dict(life.row)
    for state in (RunState.HANDED, RunState.DONE, RunState.REPORTED):
        life.move(state, outcome=FAILED, at=0.0)
    assert life.end == "FAILED"
    assert dict(life.row) == row  # the handler's copy is the claimed row, nothing the runner learnt
    for end, outcome in (
        (RunState.RELEASED, "RELEASED"),
        (RunState.LOST, None),
        (RunState.DONE, None),
    ):
        life = claimed(4)
        life.move(RunState.HANDED)
        life.move(end, outcome=OK, at=0.0)
        assert life.end == outcome


def test_a_lost_lease_tells_the_handler_why():
    life = claimed(6)
    life.move(RunState.HANDED)
    assert not life.stop.is_set()
    life.move(RunState.LOST, reason="the run is CANCELLED")
    assert life.stop.is_set() and life.stop.reason == "lease lost: the run is CANCELLED"


def test_done_needs_its_outcome():
    life = claimed(5)
    life.move(RunState.HANDED)
    with pytest.raises(IllegalMove, match="without an outcome"):
        life.move(RunState.DONE)


# -- reporting --------------------------------------------------------------------------


def test_quick_outcomes_are_reported_together():
    rig = Rig(3)
    rig.at(0, "start")
    rig.at(0.001, "finish", "start")
    rig.at(0.002, "finish", "start")
    rig.at(0.003, "finish")
    assert rig.see_through() == pytest.approx(0.003)
    assert rig.reported() == [(0.003, [1, 2, 3])]
    assert rig.outcomes() == {1: "SUCCEEDED", 2: "SUCCEEDED", 3: "SUCCEEDED"}
    assert set(rig.states().values()) == {RunState.REPORTED}
    assert rig.ledger.heartbeats == [] and rig.ledger.releases == []


def test_an_outcome_waits_at_most_report_after_for_a_slow_neighbour():
    rig = Rig(2)
    rig.at(0, "start")
    rig.at(0.1, "finish", "start")
    rig.at(0.3, "finish", outcome=FAILED)
    rig.see_through()
    assert rig.reported() == [(pytest.approx(0.1 + DEFAULTS.report_after), [1]), (0.3, [2])]
    assert rig.outcomes() == {1: "SUCCEEDED", 2: "FAILED"}
    assert rig.ledger.reports[1][1] == [(2, FAILED)]


def test_the_reports_answer_ends_each_run():
    rig = Rig(3)
    rig.ledger.ends = {2: RunState.LEASE_LOST, 3: RunState.UNREPORTED}
    rig.at(0, "start")
    rig.at(0.001, "finish", "start")
    rig.at(0.002, "finish", "start")
    rig.at(0.003, "finish")
    rig.see_through()
    assert rig.outcomes() == {1: "SUCCEEDED", 2: "LEASE_LOST", 3: "UNREPORTED"}


# -- releasing runs a slow handler holds up ---------------------------------------------


def test_runs_behind_a_slow_handler_are_released_after_release_after():
    rig = Rig(3)
    rig.at(0, "start")
    rig.at(3.0, "finish")
    assert rig.see_through() == pytest.approx(3.0)
    assert [(round(at - T0, 6), ids, reason) for at, ids, reason in rig.ledger.releases] == [
        (DEFAULTS.release_after, [2, 3], f"run #1 has been running for {DEFAULTS.release_after} s")
    ]
    assert rig.outcomes() == {1: "SUCCEEDED", 2: "RELEASED", 3: "RELEASED"}
    assert rig.reported() == [(3.0, [1])]
    assert rig.handlers.begin_next() is None  # nothing left for the handler thread


def test_release_after_counts_from_the_handlers_start():
    rig = Rig(2)
    rig.at(0.3, "start")  # the thread took the first run up late
    rig.at(2.0, "finish")
    rig.see_through()
    assert [round(at - T0, 6) for at, _, _ in rig.ledger.releases] == [0.3 + DEFAULTS.release_after]


def test_the_runs_numbers_are_the_settings_it_is_given():
    settings = replace(DEFAULTS, release_after=2.0, report_after=0.5, min_heartbeat_interval=1.0)
    rig = Rig(3, lease=0.9, settings=settings)
    rig.at(0, "start")
    rig.at(2.5, "finish")
    rig.see_through()
    assert [round(at - T0, 6) for at, _, _ in rig.ledger.releases] == [2.0]
    assert [round(at - T0, 6) for at, _ in rig.ledger.heartbeats][:2] == [1.0, 2.0]
    assert heartbeat_interval(0.9, settings) == 1.0 and idle_delay(None, settings) == DEFAULTS.max_idle


def test_a_quick_handler_releases_nothing():
    rig = Rig(2)
    rig.at(0, "start")
    rig.at(DEFAULTS.release_after - 0.01, "finish", "start")
    rig.at(DEFAULTS.release_after + 0.2, "finish")
    rig.see_through()
    assert rig.ledger.releases == []
    assert rig.outcomes() == {1: "SUCCEEDED", 2: "SUCCEEDED"}


# -- heartbeats -------------------------------------------------------------------------


def test_heartbeats_every_third_of_the_lease():
    rig = Rig(1, lease=3.0)
    rig.at(0, "start")
    rig.at(3.5, "finish")
    rig.see_through()
    assert [(round(at - T0, 6), ids) for at, ids in rig.ledger.heartbeats] == [(1.0, [1]), (2.0, [1]), (3.0, [1])]
    assert rig.outcomes() == {1: "SUCCEEDED"}


def test_a_short_lease_heartbeats_no_more_often_than_the_floor():
    assert heartbeat_interval(30) == 10 and heartbeat_interval(1.5) == 0.5
    assert heartbeat_interval(0.3) == 0.2
    rig = Rig(1, lease=0.3)
    rig.at(0, "start")
    rig.at(0.5, "finish")
    rig.see_through()
    assert [round(at - T0, 6) for at, _ in rig.ledger.heartbeats] == [0.2, 0.4]


def test_one_heartbeat_covers_every_run_held():
    rig = Rig(3, lease=0.9)  # heartbeats at 0.3, 0.6: the first before DEFAULTS.release_after
    rig.at(0, "start")
    rig.at(0.7, "finish")
    rig.see_through()
    assert [(round(at - T0, 6), ids) for at, ids in rig.ledger.heartbeats] == [(0.3, [1, 2, 3]), (0.6, [1])]


def test_a_lease_lost_mid_run_is_neither_heartbeated_again_nor_reported():
    rig = Rig(1, lease=3.0)
    rig.ledger.lost_at_heartbeat = {1}
    rig.at(0, "start")
    rig.at(3.5, "finish")
    assert rig.see_through() == pytest.approx(3.5)  # it waits for the handler all the same
    assert [round(at - T0, 6) for at, _ in rig.ledger.heartbeats] == [1.0]
    assert rig.ledger.reports == []
    assert rig.outcomes() == {1: "LEASE_LOST"}


def test_a_lease_lost_before_the_run_started_takes_it_back():
    rig = Rig(2, lease=1.0)  # a heartbeat at 1/3 s, before DEFAULTS.release_after
    rig.ledger.lost_at_heartbeat = {1, 2}
    rig.at(0, "start")
    rig.at(2.0, "finish")
    rig.see_through()
    assert rig.states() == {1: RunState.LEASE_LOST, 2: RunState.LEASE_LOST}
    assert rig.ledger.releases == [] and rig.ledger.reports == []
    assert rig.handlers.begin_next() is None  # run 2 never runs


def test_a_lease_lost_before_the_first_run_was_taken_up():
    rig = Rig(1, lease=3.0)
    rig.ledger.lost_at_heartbeat = {1}
    rig.at(2.0, "start")  # the thread is slow to take the batch's first run up
    assert rig.see_through() == pytest.approx(1.0)  # the heartbeat took it back
    assert rig.outcomes() == {1: "LEASE_LOST"}
    assert rig.handlers.begin_next() is None


# -- stopping ---------------------------------------------------------------------------


def test_a_stop_releases_the_waiting_runs_and_interrupts_the_running_one_after_the_grace():
    rig = Rig(3, grace=5.0)
    rig.at(0, "start")
    rig.at(0.2, "stop")
    assert rig.see_through() == pytest.approx(5.2)
    assert [(round(at - T0, 6), ids, reason) for at, ids, reason in rig.ledger.releases] == [
        (0.2, [2, 3], "shutting down")
    ]
    [(at, items, stopping)] = rig.ledger.reports
    assert at == pytest.approx(T0 + 5.2) and stopping is True
    assert items == [(1, Outcome("INTERRUPTED", SHUTDOWN_ERROR, SHUTDOWN_FINGERPRINT))]
    assert rig.outcomes() == {1: "INTERRUPTED", 2: "RELEASED", 3: "RELEASED"}
    assert [(e["run_id"], e["grace"]) for e in rig.events("stopping")] == [(1, 5.0)]
    assert [e["run_id"] for e in rig.events("grace over")] == [1]


def test_a_handler_that_returns_within_the_grace_is_reported_at_once():
    rig = Rig(1, grace=5.0)
    rig.at(0, "start")
    rig.at(0.2, "stop")
    rig.at(1.0, "finish")
    assert rig.see_through() == pytest.approx(1.0)
    assert rig.reported() == [(1.0, [1])] and rig.ledger.reports[0][2] is True
    assert rig.outcomes() == {1: "SUCCEEDED"}
    assert rig.events("grace over") == []


def test_a_stop_reports_the_outcomes_that_wait_at_once():
    rig = Rig(2)
    rig.at(0, "start")
    rig.at(0.1, "finish", "start")
    rig.at(0.105, "stop")  # run 1's outcome would wait until 0.11 for run 2's
    rig.at(0.5, "finish")
    rig.see_through()
    assert rig.reported() == [(0.105, [1]), (0.5, [2])]
    assert [stopping for _, _, stopping in rig.ledger.reports] == [True, True]


def test_stopping_with_only_lost_runs_does_not_wait_for_the_handler():
    rig = Rig(1, lease=3.0, grace=30.0)
    rig.ledger.lost_at_heartbeat = {1}
    rig.at(0, "start")
    rig.at(1.5, "stop")
    rig.at(20.0, "finish")
    assert rig.see_through() == pytest.approx(1.5)
    assert rig.outcomes() == {1: "LEASE_LOST"}
    assert rig.ledger.reports == [] and rig.events("stopping") == []


def test_an_outcome_posted_after_the_grace_is_dropped():
    rig = Rig(1, grace=1.0)
    rig.at(0, "start")
    rig.at(0.5, "stop")
    rig.see_through()
    rig.handlers.finish()  # the handler returns after all
    rig.batch._collect()
    assert rig.outcomes() == {1: "INTERRUPTED"} and len(rig.ledger.reports) == 1


# -- the report's own retries (runner/ledger.py), without a database --------------------


def _ledger(lease: float, finish) -> tuple[Ledger, FakeClock, io.StringIO]:
    clock, out = FakeClock(T0), io.StringIO()
    ledger = Ledger("", "unit", timedelta(seconds=lease), EventLog(json_lines=True, stream=out), clock)
    ledger._finish_runs = finish  # type: ignore[method-assign]
    return ledger, clock, out


def _down(items):
    raise psycopg.OperationalError("server closed the connection unexpectedly")


def _run() -> ClaimedRun:
    run = claimed(9)
    run.move(RunState.HANDED)
    run.move(RunState.DONE, outcome=OK, at=T0)
    return run


@pytest.mark.parametrize("stopping,limit", [(False, 3.0), (True, DEFAULTS.stopping_report_retry)])
def test_a_report_is_retried_until_the_lease_would_be_gone(stopping, limit):
    ledger, clock, out = _ledger(30.0 if stopping else 3.0, _down)
    (came,) = ledger.report([_run()], stopping=stopping).values()
    assert came.state is RunState.UNREPORTED and came.reason is not None
    assert came.reason.startswith("database unavailable for the lease's length: server closed")
    assert sum(clock.slept) >= limit > sum(clock.slept[:-1])  # gave up at the first failure past the limit
    assert all(0 < s <= 2.0 * 1.25 for s in clock.slept)  # backed off, capped
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert events.count("database unavailable") == len(clock.slept)


def test_a_report_outlives_a_short_outage():
    calls = []

    def finish(items):
        calls.append(1)
        if len(calls) < 3:
            raise DatabaseUnavailable("cannot connect to the database")
        return {9: None}

    ledger, clock, _ = _ledger(30.0, finish)
    assert ledger.report([_run()], stopping=False) == {9: Reported(RunState.REPORTED, None)}
    assert len(clock.slept) == 2


def test_after_a_retry_our_own_status_is_not_a_lost_lease():
    answers = [psycopg.OperationalError("server closed the connection unexpectedly"), {9: "the run is SUCCEEDED"}]

    def finish(items):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    ledger, _, _ = _ledger(30.0, finish)
    assert ledger.report([_run()], stopping=False) == {9: Reported(RunState.REPORTED, None)}
    # the same answer to a first call: someone else ended the run
    ledger, _, out = _ledger(30.0, lambda items: {9: "the run is SUCCEEDED"})
    assert ledger.report([_run()], stopping=False) == {9: Reported(RunState.LEASE_LOST, "the run is SUCCEEDED")}


def test_a_report_error_that_no_retry_can_mend_propagates():
    def finish(items):
        raise psycopg.errors.InvalidParameterValue("bad value")

    ledger, clock, _ = _ledger(30.0, finish)
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        ledger.report([_run()], stopping=False)
    assert clock.slept == []


# -- the loop's other decisions ---------------------------------------------------------


def test_the_idle_stand_by():
    assert idle_delay(None) == DEFAULTS.max_idle  # nothing queued: re-check at least this often
    assert idle_delay(2.5) == 2.5  # the next run's not_before
    assert idle_delay(-3.0) == idle_delay(0.0) == 0.01  # claimable now (a race lost): a short pause
    assert idle_delay(3600.0) == DEFAULTS.max_idle


def _ended(end: str) -> ClaimedRun:
    run = claimed(1)
    run.move(RunState.HANDED)
    if end == "RELEASED":
        run.move(RunState.RELEASED)
    else:
        run.move(RunState.DONE, outcome=Outcome(end), at=0.0)
        run.move(RunState.REPORTED)
    return run


def test_a_batch_doubles_while_quick_and_falls_back_to_one():
    quick = [_ended("SUCCEEDED")]
    sizes = [1]
    for _ in range(7):
        sizes.append(next_batch_size(sizes[-1], quick, 0.01, 32))
    assert sizes == [1, 2, 4, 8, 16, 32, 32, 32]
    assert next_batch_size(8, quick, DEFAULTS.release_after, 32) == 1  # a slow batch
    assert next_batch_size(8, [_ended("SUCCEEDED"), _ended("RELEASED")], 0.01, 32) == 1
    assert next_batch_size(8, [], 0.0, 32) == 1  # nothing to claim: an idle spell follows
    assert next_batch_size(1, quick, 0.0, 1) == 1
