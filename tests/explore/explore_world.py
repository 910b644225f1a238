"""One scenario's world: its actors on one database, reset between two interleavings
(the ledger emptied and seeded again, the sessions kept), one step at a time, the
invariants checked after each.

A scenario is a small script per actor. Steps of an actor run in its script's order;
which actor steps next is the explorer's choice. A step blocked on a lock stays
pending (the actor is not enabled) until a later step frees it; once no actor can
step, what is still blocked is cancelled, and the end's invariants are checked."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import explore_invariants as inv
import psycopg
from explore_actors import Actor, Fault, Operator, Rogue, Runner, Scheduler, Squatter
from explore_sessions import STEP_HUNG_AFTER

# the schedule's cron: a year between periods, so that the wall clock never brings
# one due during an interleaving; only the clock's steps do
YEARLY = "0 0 1 1 *"
WORKER = "ocr"
# a scheduler's deciding statements: only the lock holder's work session may succeed
DECIDING = ("tick.decide", "reap", "retries")
FENCED = ("heartbeat", "finish_ok", "finish_fail", "release")
KINDS: dict[str, type[Actor]] = {
    "scheduler": Scheduler,
    "runner": Runner,
    "squatter": Squatter,
    "operator": Operator,
    "rogue": Rogue,
}
# each kind's group login (a squatter: a reader, a login in no scheduling group; a
# rogue: a runner's login, which ADR 0015 lets run a scheduler); a kind not named here
# (a scenario's own, see Scenario.kinds) logs in as the schema's owner
LOGINS = {"scheduler": "scheduler", "runner": "runner", "squatter": "reader", "operator": "operator", "rogue": "runner"}
# how long an evicted holder's work session may take to be gone before the harness
# calls it spared (World._gone)
EVICTED_GONE_WITHIN = 0.1

Step = tuple[str, str]


@dataclass
class Scenario:
    """Actors by name -> (kind, script); `setup`: steps run first, the same in every
    interleaving (not interleaved). Actors of kind "fault" crash sessions and step the
    clock; `kinds` adds actor classes of the scenario's own (a test's planted bug)."""

    name: str
    actors: dict[str, tuple[str, list[str]]]
    setup: list[Step] = field(default_factory=list)
    kinds: dict[str, type[Actor]] = field(default_factory=dict)


class World:
    def __init__(self, admin_dsn: str, dsn_as: dict[str, str], scenario: Scenario):
        self.scenario = scenario
        self.admin = psycopg.connect(admin_dsn, autocommit=True)
        self.actors: dict[str, Actor] = {}
        self.scripts: dict[str, list[str]] = {}
        self.kinds: dict[str, str] = {}
        kinds = {**KINDS, **scenario.kinds}
        for name, (kind, script) in scenario.actors.items():
            dsn = dsn_as[LOGINS[kind]] if kind in LOGINS else admin_dsn
            if kind == "fault":
                actor: Actor = Fault(name, admin_dsn, self._pid_of)
            elif kind == "operator":
                actor = Operator(name, dsn, WORKER, self._live_run)
            else:
                actor = kinds[kind](name, dsn)  # type: ignore[call-arg]
            self.kinds[name] = kind
            self.actors[name] = actor
            self.scripts[name] = script
        self.sequence = self.admin.execute(
            "SELECT pg_get_serial_sequence('scrinalia.archive_worker_runs', 'run_id')"
        ).fetchone()[0]
        self.pc: dict[str, int] = {}
        self.pending: dict[str, tuple[str, str, Any]] = {}  # by session
        self.periods: list[tuple[str, datetime]] = []
        self.accounted: set[tuple[str, datetime]] = set()
        self.killed: set[int] = set()
        self.trace: list[Step] = []
        self.evict_raced = 0  # over the world's life, not reset

    # --- the world between two interleavings ------------------------------------------

    def reset(self) -> None:
        for name in list(self.pending):
            self._cancel(name)
        for a in self.actors.values():
            a.reset()
        self._closed_gone()
        self.admin.execute("SELECT pg_advisory_unlock_all()")
        with self.admin.transaction():
            self.admin.execute("DELETE FROM scrinalia.archive_worker_runs")
            self.admin.execute("DELETE FROM scrinalia.archive_worker_schedules")
            self.admin.execute("SELECT setval(%s, 1, false)", (self.sequence,))
            self.admin.execute(
                "UPDATE scrinalia.scheduler_state SET heartbeat_pid = NULL, heartbeat_work_pid = NULL,"
                " heartbeat_at = NULL, last_tick_at = NULL, heartbeat_by = NULL, last_tick_by = NULL"
            )
            due = self.admin.execute(
                "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
                " VALUES (%s, %s, 'UTC', now() - interval '30 seconds') RETURNING worker_name, next_run_at",
                (WORKER, YEARLY),
            ).fetchall()
        self.pc = dict.fromkeys(self.actors, 0)
        self.periods, self.accounted, self.killed, self.trace = list(due), set(), set(), []
        for actor, step in self.scenario.setup:
            self._run(actor, step)

    def close(self) -> None:
        for name in list(self.pending):
            self._cancel(name)
        for a in self.actors.values():
            for s in a.sessions.values():
                s.shutdown()
        self.admin.close()

    # --- who may step -----------------------------------------------------------------

    def enabled(self) -> list[str]:
        """The actors whose next step's session is not blocked."""
        return [
            n
            for n, a in self.actors.items()
            if self.pc[n] < len(self.scripts[n]) and a.session_of(self.next_step(n)).name not in self.pending
        ]

    def next_step(self, name: str) -> str:
        return self.scripts[name][self.pc[name]]

    def step(self, name: str) -> list[str]:
        """The actor's next step; the violations it (or a step it unblocked) caused."""
        step = self.next_step(name)
        self.pc[name] += 1
        return self._run(name, step)

    def settle_end(self) -> list[str]:
        """No actor can step: what is still blocked is cancelled (each cancel may let
        its actor step on, so the caller goes on stepping), else the end's checks."""
        if self.pending:
            return self._cancel(sorted(self.pending)[0])
        return inv.lost_periods(self.admin, self.periods, self.accounted)

    # --- a step, and what it is checked against -----------------------------------------

    def _run(self, name: str, step: str) -> list[str]:
        self.trace.append((name, step))
        actor = self.actors[name]
        # a runner's held runs as they were before its call: a lost lease must stay so
        before = (
            (list(actor.held), inv.leases(self.admin, actor.held))
            if isinstance(actor, Runner) and step in FENCED
            else None
        )
        if isinstance(actor, Operator):
            self._operator_reason(step)
        session, fn = actor.plan(step)
        self._closed_gone()
        if fn is None:
            return self._done(name, step, ("skipped", None), before)
        victims = self._evict_victims() if step == "evict" else []
        session.start(step, fn)
        outcome = session.settle(self.admin)
        if victims and outcome is not None and outcome[0] == "ok" and outcome[1][0]:
            self._gone(victims)
        if outcome is None:
            self.pending[session.name] = (name, step, session)  # (blocked: its rows' before is stale)
            return self._unblocked()
        return self._done(name, step, outcome, before) + self._unblocked()

    def _unblocked(self) -> list[str]:
        """Steps this one let go (a lock freed), in a fixed order, until none moves."""
        out: list[str] = []
        moved = True
        while moved:
            moved = False
            for key in sorted(self.pending):
                name, step, session = self.pending[key]
                outcome = session.settle(self.admin)
                if outcome is not None:
                    del self.pending[key]
                    out += self._done(name, step, outcome, None)
                    moved = True
        return out

    def _cancel(self, key: str) -> list[str]:
        name, step, session = self.pending.pop(key)
        outcome = session.cancel(self.admin)
        return self._done(name, step, outcome, None) + self._unblocked()

    def _done(self, name: str, step: str, outcome: tuple[str, Any], before: Any) -> list[str]:
        actor = self.actors[name]
        actor.done(step, outcome)
        out: list[str] = []
        kind, value = outcome
        if isinstance(actor, Scheduler) and step in DECIDING and kind == "ok":
            out += inv.decided_as_holder(self.admin, f"{name} {step}", actor.lock.pid, actor.work.pid)
        if isinstance(actor, Scheduler) and step == "tick.commit" and kind == "ok":
            self.accounted |= {(w, p) for w, _, p, _ in actor.logged if p is not None}
        if isinstance(actor, Runner) and before is not None:
            held, rows = before
            out += inv.fenced_wrote(name, step, rows, inv.leases(self.admin, held))
        if isinstance(actor, Fault) and kind == "ok":
            if step.startswith("crash.") and value:
                self.killed.add(self._pid_of(step.partition(".")[2]) or 0)
            if step == "clock.period_passes":
                self.periods += [(w, p) for w, p in value]
        return out + inv.ledger(self.admin)

    def _operator_reason(self, step: str) -> None:
        """An operator's change of a schedule is its period's logged reason (the CLI
        says what it did)."""
        if step in ("put_schedule", "pause"):
            row = self.admin.execute(
                "SELECT next_run_at FROM scrinalia.archive_worker_schedules WHERE worker_name = %s", (WORKER,)
            ).fetchone()
            if row and row[0] is not None:
                self.accounted.add((WORKER, row[0]))

    # --- what the harness knows of the sessions -------------------------------------------

    def _evict_victims(self) -> list[int]:
        """The sessions an eviction now would end: the lock's holder, and when it is a
        scheduler (its heartbeat), the work session it vouches for, of its login
        (evict_lock_holder)."""
        row = self.admin.execute(
            "SELECT h.pid, x.pid FROM scrinalia.scheduler_state st"
            "  JOIN pg_stat_activity h ON h.pid = scrinalia.scheduler_lock_holder()"
            "  LEFT JOIN pg_stat_activity x ON x.pid = st.heartbeat_work_pid AND x.usesysid = h.usesysid"
            "   AND st.heartbeat_pid = h.pid"
        ).fetchone()
        return [p for p in row or () if p is not None]

    def _gone(self, victims: list[int]) -> None:
        """Waits until the sessions the eviction ended are gone (their locks with them),
        so that what waited for them is granted before the next step. A work session
        the eviction spared (as evict_lock_holder did while it read that session after
        ending the holder, when a standby queued for the lock had overwritten the
        heartbeat by then) is counted in evict_raced and ended here, so that every
        replay goes the same way; the replays check that none is."""
        self.killed |= set(victims)
        holder, work = victims[0], victims[1:]
        self._wait_gone([holder], STEP_HUNG_AFTER)
        if work and not self._wait_gone(work, EVICTED_GONE_WITHIN):
            self.evict_raced += 1
            self.admin.execute("SELECT pg_terminate_backend(%s)", (work[0],))
            self._wait_gone(work, STEP_HUNG_AFTER)

    def _closed_gone(self) -> None:
        """Waits until the backends of the connections the actors closed are gone: a
        closed connection's transaction rolls back, and its locks go, only then."""
        ended = [p for a in self.actors.values() for s in a.sessions.values() for p in s.ended]
        for a in self.actors.values():
            for s in a.sessions.values():
                s.ended.clear()
        if ended:
            self._wait_gone(ended, STEP_HUNG_AFTER)

    def _wait_gone(self, pids: list[int], within: float) -> bool:
        deadline = time.monotonic() + within
        while self.admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def _pid_of(self, what: str) -> int | None:
        actor, _, role = what.partition(".")
        return self.actors[actor].sessions[role].pid

    def _live_run(self, worker: str) -> int | None:
        row = self.admin.execute(
            "SELECT max(run_id) FROM scrinalia.archive_worker_runs WHERE worker_name = %s"
            " AND status IN ('QUEUED', 'RUNNING')",
            (worker,),
        ).fetchone()
        return row[0]

    def key(self) -> tuple:
        """The state, abstracted (see explore_invariants.STATE), with every actor's place."""
        name_of = {s.pid: s.name for a in self.actors.values() for s in a.sessions.values() if s.pid is not None}
        actors = tuple(
            (
                n,
                self.pc[n],
                a.local_state(),
                tuple((s.name in self.pending, s.pid in self.killed) for s in a.sessions.values()),
            )
            for n, a in self.actors.items()
        )
        index = {p: i for i, p in enumerate(self.periods)}
        return (
            inv.state(self.admin, name_of),
            actors,
            len(self.periods),
            tuple(sorted(index[p] for p in self.accounted if p in index)),
        )
