"""The lock session's states (scheduler.leadership), without a database: a fake lock
session scripted by each test and a fake clock, so every wait is a recorded number."""

from __future__ import annotations

import io
import json
import random
import threading

import psycopg
import pytest

from scrinalia_workers.errors import ConfigError, LockLost
from scrinalia_workers.gateway.backoff import Backoff
from scrinalia_workers.logs import EventLog
from scrinalia_workers.scheduler.leadership import (
    HOLDER_REPORT_EVERY,
    LOOK_AGAIN,
    SESSIONS_ENDED,
    Leadership,
    State,
)
from scrinalia_workers.testkit.clock import FakeClock
from scrinalia_workers.text import HIDDEN

SCHEDULER_B = {
    "holder_pid": 4242,
    "holder_role": "scrinalia_scheduler_login",
    "holder_application": "scrinalia-scheduler lock",
    "holder_backend_start": "2026-01-01T00:00:00+00:00",
    "holder_is_scheduler": True,
    "heartbeat_at": "2026-01-01T00:00:01+00:00",
}
SQUATTER = dict(SCHEDULER_B, holder_pid=666, holder_role="sw_login_nobody", holder_is_scheduler=False)
NOT_EVICTED = {"evicted": False, "holder_pid": None, "holder_role": None, "reason": "heartbeat fresh"}


class FakeSession:
    """A LockSession whose answers the test scripts. `acquired` holds the answers of the
    successive attempts (True, False or an exception to raise); when it runs out, the
    stop event is set (the test is over) and the attempt fails. A failed attempt spent
    its `wait` in the lock's queue: the fake clock moves that much."""

    def __init__(self, stop: threading.Event, acquired=(), heartbeats=(), holder=SCHEDULER_B, evictions=(), clock=None):
        self.stop = stop
        self.clock = clock
        self.acquired = list(acquired)
        self.heartbeats = list(heartbeats)
        self.holder_row = holder
        self.evictions = list(evictions)
        self.calls: list[str] = []
        self.waits: list[float] = []
        self.seen: list[int | None] = []

    def acquire(self, wait: float = 0.0) -> bool:
        self.calls.append("acquire")
        self.waits.append(wait)
        if not self.acquired:
            self.stop.set()
            return False
        answer = self.acquired.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if not answer and self.clock is not None:
            self.clock.advance(wait)
        return answer

    def heartbeat(self) -> bool:
        self.calls.append("heartbeat")
        answer = self.heartbeats.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def evict_stale(self, seen_pid: int | None = None) -> dict:
        self.calls.append("evict_stale")
        self.seen.append(seen_pid)
        if self.evictions:
            return self.evictions.pop(0)
        return dict(NOT_EVICTED, holder_pid=self.holder_row["holder_pid"], holder_role=self.holder_row["holder_role"])

    def holder(self) -> dict:
        self.calls.append("holder")
        return self.holder_row

    def release(self) -> None:
        self.calls.append("release")

    def close(self) -> None:
        self.calls.append("close")


class Machine:
    """A Leadership over a FakeSession and a FakeClock, its log lines captured; the
    reconnect backoff without jitter, so its delays are exact."""

    def __init__(self, standby_retry: float = 3.0, **script):
        self.stop = threading.Event()
        self.clock = FakeClock()
        self.session = FakeSession(self.stop, clock=self.clock, **script)
        self.out = io.StringIO()
        self.lead = Leadership(
            self.session,
            name="me",
            log=EventLog(json_lines=True, stream=self.out, level="debug"),
            stop=self.stop,
            standby_retry=standby_retry,
            clock=self.clock,
            reconnect=Backoff(base=0.2, cap=max(standby_retry, 0.2), jitter=0.0, rng=random.Random(0)),
        )

    def events(self, *names: str) -> list[dict]:
        evs = [json.loads(x) for x in self.out.getvalue().splitlines()]
        return [e for e in evs if not names or e["event"] in names]


def test_a_new_session_stands_by_and_holds_once_it_gets_the_lock():
    m = Machine(acquired=[True])
    assert m.lead.state is State.STANDBY
    assert m.lead.attempt() is True
    assert m.lead.state is State.HOLDING
    assert [e["event"] for e in m.events()] == ["lock acquired"]
    with pytest.raises(RuntimeError):
        m.lead.attempt()  # no second attempt while holding: the lock is taken once


def test_a_failed_attempt_stays_in_standby_names_the_holder_and_waits_standby_retry():
    m = Machine(standby_retry=3.0, acquired=[False, False])

    def hold():
        raise AssertionError("held without the lock")

    m.lead.run(hold)
    # two failed attempts, then the scripted end (a third attempt that sets stop)
    assert m.session.calls[:6] == ["acquire", "evict_stale", "holder", "acquire", "evict_stale", "holder"]
    # each attempt waits standby_retry in the lock's queue; no sleep between them, when
    # a squatter's try-lock could win
    assert m.session.waits[:2] == [3.0, 3.0] and m.clock.slept == []
    assert m.session.seen[:2] == [None, 4242]  # the holder seen at the last look is passed back
    standby = m.events("standby")
    assert len(standby) == 1  # the same holder is named once, not at every attempt
    assert standby[0]["level"] == "info" and standby[0]["holder_pid"] == 4242
    assert standby[0]["reason"] == "another scheduler holds the lock" and standby[0]["retry_every"] == 3.0
    assert m.events("lock acquired") == []
    assert m.lead.state is State.STOPPED


def test_the_holder_is_named_again_after_holder_report_every_or_when_it_changes():
    m = Machine(standby_retry=HOLDER_REPORT_EVERY / 2, acquired=[False] * 4)
    holders = iter([SCHEDULER_B, SCHEDULER_B, SCHEDULER_B, SQUATTER, SQUATTER])
    m.session.holder = lambda: next(holders)
    m.lead.run(lambda: None)
    pids = [e["holder_pid"] for e in m.events("standby")]
    # at 0 s named, at 30 s not (same holder), at 60 s named again, then a new holder at once
    assert pids == [4242, 4242, 666]


def test_a_squatter_on_the_key_is_named_loudly():
    m = Machine(acquired=[False], holder=SQUATTER)
    m.lead.run(lambda: None)
    (ev,) = m.events("standby")
    assert ev["level"] == "error" and ev["holder_role"] == "sw_login_nobody"
    assert "NOT a scheduler" in ev["reason"] and "heartbeat fresh" in ev["reason"]


def test_a_stale_holder_is_evicted_then_the_next_attempt_gets_the_lock():
    evicted = {"evicted": True, "holder_pid": 4242, "holder_role": "r", "reason": "heartbeat 5 s old"}
    m = Machine(standby_retry=0.3, acquired=[False, True], evictions=[evicted])
    holds = []

    def hold():
        holds.append(m.lead.state)
        m.stop.set()

    m.lead.run(hold)
    assert m.session.calls[:3] == ["acquire", "evict_stale", "acquire"]  # nobody named: it was ended
    (ev,) = m.events("stale holder evicted")
    assert ev["level"] == "warning" and ev["holder_pid"] == 4242 and ev["reason"] == "heartbeat 5 s old"
    assert m.events("standby") == []
    # no sleep, and the next look soon: the lock went to the next in the queue, ahead of
    # this standby's session, which kept its place
    assert m.clock.slept == [] and m.session.waits == [0.3, LOOK_AGAIN]
    assert holds == [State.HOLDING]
    assert [e["event"] for e in m.events()] == ["stale holder evicted", "lock acquired", "stopping"]


def test_a_lost_lock_closes_the_sessions_backs_off_and_stands_by_again():
    m = Machine(standby_retry=3.0, acquired=[True, True])
    states = []

    def hold():
        states.append(m.lead.state)
        if len(states) == 1:
            raise LockLost("the lock is no longer held by our session")
        m.stop.set()

    m.lead.run(hold)
    assert states == [State.HOLDING, State.HOLDING]
    assert m.session.calls == ["acquire", "close", "acquire", "release", "close"]
    assert m.clock.slept == [0.2]  # the reconnect backoff's first delay, not standby_retry
    lost = m.events("lock lost")
    assert lost == [
        {
            "ts": lost[0]["ts"],
            "event": "lock lost",
            "level": "warning",
            "name": "me",
            "reason": "the lock is no longer held by our session",
        }
    ]
    assert [e["event"] for e in m.events()] == ["lock acquired", "lock lost", "lock acquired", "stopping"]


def test_the_reconnect_backoff_doubles_up_to_standby_retry_and_restarts_once_held():
    down = psycopg.OperationalError("connection refused")
    m = Machine(standby_retry=1.0, acquired=[down, down, down, down, True, down])
    held = []

    def hold():
        held.append(1)
        raise LockLost("terminated")

    m.lead.run(hold)
    # four failed attempts: 0.2, 0.4, 0.8, then capped at 1.0; held; lost: 0.2 again; then 0.4
    assert m.clock.slept == [0.2, 0.4, 0.8, 1.0, 0.2, 0.4]
    standby = [e for e in m.events("standby") if e["level"] == "warning"]
    assert [e["retry_in"] for e in standby] == [0.2, 0.4, 0.8, 1.0, 0.4]
    assert all(e["level"] == "warning" and e["reason"].startswith("database unavailable: ") for e in standby)
    assert held == [1]
    assert m.session.calls.count("close") == 6 + 1  # after each failure, and at the stop


def test_an_error_while_holding_is_said_as_a_lost_lock_with_its_retry():
    m = Machine(acquired=[True])

    def hold():
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    m.lead.run(hold)
    (lost,) = m.events("lock lost")
    # what a resumed frozen holder meets: its sessions were ended while it was frozen
    assert lost["reason"] == f"database unavailable: server closed the connection unexpectedly ({SESSIONS_ENDED})"
    assert m.lead.state is State.STOPPED and m.session.calls[-1] == "close"
    assert lost["retry_in"] == 0.2
    assert m.session.calls[:2] == ["acquire", "close"]
    assert "release" not in m.session.calls  # the lock went with the session


def test_a_bug_while_holding_is_not_a_crash_loop():
    m = Machine(acquired=[True])

    def hold():
        raise KeyError("column")

    m.lead.run(hold)
    (lost,) = m.events("lock lost")
    assert lost["reason"].startswith("unexpected error KeyError: ")
    assert m.clock.slept == [0.2]


def test_a_configuration_error_leaves_the_machine():
    m = Machine(acquired=[ConfigError("the schema moved")])
    with pytest.raises(ConfigError):
        m.lead.run(lambda: None)
    assert m.events() == []


def test_the_check_asks_the_heartbeat_and_raises_lock_lost_when_it_says_no():
    m = Machine(acquired=[True], heartbeats=[True, False, psycopg.OperationalError("gone\n  detail")])
    with pytest.raises(LockLost):
        m.lead.check()  # in STANDBY: no pass, and the database is not even asked
    assert m.session.calls == []
    m.lead.attempt()
    m.lead.check()
    with pytest.raises(LockLost, match="no longer held by our session"):
        m.lead.check()
    with pytest.raises(LockLost, match="^gone detail \\(the sessions holding the lock were closed"):
        m.lead.check()
    assert m.session.calls == ["acquire", "heartbeat", "heartbeat", "heartbeat"]


def test_stopping_while_holding_releases_the_lock():
    m = Machine(acquired=[True])
    m.lead.run(lambda: m.stop.set())
    assert m.session.calls == ["acquire", "release", "close"]
    assert m.lead.state is State.STOPPED
    assert [e["event"] for e in m.events()] == ["lock acquired", "stopping"]
    m.lead.close()  # a second close says nothing more
    assert len(m.events("stopping")) == 1


def test_stopping_in_standby_releases_nothing():
    m = Machine()
    m.stop.set()
    m.lead.run(lambda: None)
    assert m.session.calls == ["close"]
    assert [e["event"] for e in m.events()] == ["stopping"]


def test_a_stop_during_the_backoff_ends_the_wait():
    m = Machine(acquired=[True])

    def hold():
        m.stop.set()  # SIGTERM while the pass fails
        raise LockLost("lost")

    m.lead.run(hold)
    assert m.clock.slept == []  # no backoff wait: the stop is looked at first
    assert m.session.calls == ["acquire", "close", "close"]
    assert m.lead.state is State.STOPPED


STALE_UNEVICTABLE = {
    "evicted": False,
    "holder_pid": 4242,
    "holder_role": "scrinalia_scheduler_login",
    "reason": "cannot end the session of pid 4242 (role r, a stale scheduler): the owner of the scrinalia"
    " schema needs membership in pg_signal_backend (GRANT pg_signal_backend TO owner, by a superuser)",
}


def test_a_stale_holder_it_cannot_end_is_said_with_the_real_reason_at_a_bounded_rate():
    alive = dict(NOT_EVICTED, holder_pid=4242, holder_role="scrinalia_scheduler_login", reason="the holder is alive")
    m = Machine(
        standby_retry=HOLDER_REPORT_EVERY / 4, acquired=[False] * 7, evictions=[alive] + [STALE_UNEVICTABLE] * 7
    )
    m.lead.run(lambda: None)
    standby = m.events("standby")
    # alive: named once (info); then stale and not evictable: at once, then once per HOLDER_REPORT_EVERY
    assert [e["level"] for e in standby] == ["info", "error", "error"]
    assert "cannot end its session" in standby[1]["reason"]
    assert "GRANT pg_signal_backend TO owner" in standby[1]["reason"] and standby[1]["eviction"].startswith("cannot")
    assert len(m.session.waits) == 8  # the attempts kept waiting in the queue meanwhile


def test_a_holder_that_can_schedule_but_never_heartbeats_is_not_called_a_scheduler():
    runner_squat = dict(SCHEDULER_B, holder_pid=77, heartbeat_pid=None)
    m = Machine(acquired=[False], holder=runner_squat)
    m.lead.run(lambda: None)
    (ev,) = m.events("standby")
    assert ev["level"] == "error" and "NOT a scheduler" in ev["reason"]


def test_a_holder_the_login_may_not_see_is_said_hidden_never_none():
    hidden = dict(SCHEDULER_B, holder_application=None, holder_backend_start=None)
    m = Machine(acquired=[False], holder=hidden)
    m.lead.run(lambda: None)
    (ev,) = m.events("standby")
    assert ev["holder_application"] == ev["holder_since"] == HIDDEN
    out = io.StringIO()  # and the plain log line (no --json) prints no None
    EventLog(json_lines=False, stream=out)("standby", **{k: v for k, v in ev.items() if k not in ("ts", "event")})
    assert "None" not in out.getvalue() and "holder_since=hidden" in out.getvalue()


def test_a_holder_that_is_not_a_scheduler_is_looked_at_again_soon_until_ended():
    """The second look, which ends a busy squatter, comes LOOK_AGAIN later, not a
    standby_retry: a queue of squatters ahead of this standby is drained in a second."""
    m = Machine(standby_retry=3.0, acquired=[False, False], holder=SQUATTER)
    m.lead.run(lambda: None)
    assert m.session.waits[:3] == [3.0, LOOK_AGAIN, LOOK_AGAIN]
    assert m.session.seen[:2] == [None, 666]


def test_a_live_scheduler_holding_the_lock_is_looked_at_every_standby_retry():
    m = Machine(standby_retry=3.0, acquired=[False, False])
    m.lead.run(lambda: None)
    assert m.session.waits[:3] == [3.0, 3.0, 3.0]
