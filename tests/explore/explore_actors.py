"""The actors whose steps the explorer interleaves: each a small class over real
sessions of its real group login, each step a named callable sending exactly what
the shim sends (scrinalia_workers.gateway.statements).

A step is `plan(step) -> (session, fn)`: fn(conn) runs on the session's thread and
returns what the actor keeps; `done(step, outcome)` records it. A step of a scheduler
whose session was ended by a crash reopens both of its sessions first, as the daemon
does once it sees the lock lost (LOST, then STANDBY)."""

from __future__ import annotations

from typing import Any

import psycopg
from explore_sessions import Outcome, Session
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers.gateway.statements import cli as cli_sql
from scrinalia_workers.gateway.statements import runner as runner_sql
from scrinalia_workers.gateway.statements import scheduler as sql
from scrinalia_workers.scheduler.occurrences import Occurrences
from scrinalia_workers.scheduler.settings import DEFAULTS

# scrinalia.scheduler_lock_key(): a reader login may not call it, but may take the key
LOCK_KEY = 7305764011424514049
# the standby's wait in the lock's queue: longer than any interleaving, so that it
# ends only when the lock comes, or when the harness cancels it at the end
QUEUE_WAIT = 60.0
LEASE = "5 minutes"
# the cron the operator's put_schedule moves a schedule to
OTHER_CRON = "0 0 1 7 *"

Plan = tuple[Session, Any]


class Actor:
    """An actor: its sessions and its steps (the method step_<name>, dots as '_')."""

    name: str

    def __init__(self, name: str):
        self.name = name
        self.sessions: dict[str, Session] = {}

    def session(self, role: str, dsn: str, application_name: str) -> Session:
        s = Session(f"{self.name}.{role}", dsn, application_name)
        self.sessions[role] = s
        return s

    def session_of(self, step: str) -> Session:
        """The session the step runs on (the actor's only one, unless it says)."""
        return next(iter(self.sessions.values()))

    def plan(self, step: str) -> Plan:
        return getattr(self, "step_" + step.replace(".", "_").replace("-", "_"))()

    def done(self, step: str, outcome: Outcome) -> None:
        """What the actor keeps of a step's outcome (nothing by default)."""

    def reset(self) -> None:
        for s in self.sessions.values():
            s.reset()

    def local_state(self) -> tuple:
        """What of this actor decides its next steps' effects (for the state hash)."""
        return ()


class Scheduler(Actor):
    """A scheduler: its lock session (the lock's queue, the heartbeat), its work session
    (the reaper's pass and the tick, one chunk: check the lock, due + next occurrences
    + tick, commit) and its look session (the standby's eviction)."""

    def __init__(self, name: str, dsn: str):
        super().__init__(name)
        self.lock = self.session("lock", dsn, "scrinalia-scheduler lock")
        self.work = self.session("work", dsn, "scrinalia-scheduler")
        self.look = self.session("look", dsn, "scrinalia-scheduler standby")
        self.tick_open = False  # a tick transaction whose lock check passed
        self.decided: list[tuple] = []  # the open tick's decisions, logged at its commit
        self.logged: list[tuple] = []  # (worker, decision, scheduled_for, reason) committed
        self.seen_pid: int | None = None  # the holder seen at the last look

    def reset(self) -> None:
        super().reset()
        self.tick_open, self.decided, self.logged, self.seen_pid = False, [], [], None

    def local_state(self) -> tuple:
        return (self.tick_open, len(self.decided), self.seen_pid is not None)

    def session_of(self, step: str) -> Session:
        if step in ("take_lock", "heartbeat", "release_lock"):
            return self.lock
        return self.look if step == "evict" else self.work

    def _sessions_up(self) -> None:
        """LOST -> STANDBY: a session of ours was ended; both are opened anew (unless
        one is still waiting: the other's step then fails and says so)."""
        if self.lock.pending is None and self.work.pending is None and not (self.lock.alive and self.work.alive):
            self.lock.close()
            self.work.close()
            self.tick_open, self.decided = False, []
        self.lock.open()
        self.work.open()

    def step_take_lock(self) -> Plan:
        self._sessions_up()
        return self.lock, lambda c: c.execute(sql.TAKE_LOCK, (self.name, QUEUE_WAIT, None)).fetchone()[0]

    def step_heartbeat(self) -> Plan:
        self._sessions_up()
        work_pid = self.work.pid
        return self.lock, lambda c: c.execute(sql.HEARTBEAT, (self.name, work_pid)).fetchone()[0]

    def step_release_lock(self) -> Plan:
        self._sessions_up()
        return self.lock, lambda c: c.execute(sql.RELEASE_LOCK).fetchone()[0]

    def step_evict(self) -> Plan:
        seen = self.seen_pid
        return self.look, lambda c: c.execute(sql.EVICT_LOCK_HOLDER, (seen,)).fetchone()

    def step_reap(self) -> Plan:
        self._sessions_up()
        return self.work, lambda c: c.execute(sql.REAP_EXPIRED_LEASES).fetchall()

    def step_retries(self) -> Plan:
        self._sessions_up()
        return self.work, lambda c: c.execute(sql.CREATE_RETRIES).fetchall()

    def step_tick_check(self) -> Plan:
        """The chunk's transaction opened, its first statement the lock check."""
        self._sessions_up()
        lock_pid = self.lock.pid

        def run(c: psycopg.Connection) -> None:
            c.execute("BEGIN")
            c.execute(sql.CHECK_LOCK, (lock_pid,))

        return self.work, run

    def step_tick_decide(self) -> Plan:
        """due_schedules, the next occurrences computed as the shim does, tick_v2."""
        if not (self.tick_open and self.work.alive):
            return self.work, None  # the chunk failed before: nothing to send
        name = self.name

        def run(c: psycopg.Connection) -> list[tuple]:
            cur = c.execute(sql.DUE_SCHEDULES, (DEFAULTS.tick_chunk + 1,))
            due = [dict(zip([col.name for col in cur.description or ()], row)) for row in cur.fetchall()]
            if not due:
                return []
            nexts = Occurrences().after_each([(d["cron"], d["timezone"]) for d in due], due[0]["db_now"])
            return c.execute(sql.TICK, ([d["worker_name"] for d in due], nexts, name)).fetchall()

        return self.work, run

    def step_tick_commit(self) -> Plan:
        if not (self.tick_open and self.work.alive):
            return self.work, None
        return self.work, lambda c: c.execute("COMMIT")

    def done(self, step: str, outcome: Outcome) -> None:
        kind, value = outcome
        if step == "tick.check":
            self.tick_open = kind == "ok"
            self.decided = []
        elif step == "tick.decide" and self.tick_open:
            if kind == "ok":
                self.decided = [(r[0], r[1], r[3], r[5]) for r in value]
            else:
                self.tick_open, self.decided = False, []  # the chunk rolls back alone
        elif step == "tick.commit" and self.tick_open:
            if kind == "ok":
                self.logged += self.decided
            self.tick_open, self.decided = False, []
        elif step == "evict" and kind == "ok":
            self.seen_pid = None if value[0] else value[1]


class Rogue(Scheduler):
    """A scheduler's steps sent from a runner's login (which may run a scheduler, ADR
    0015) that takes the lock's key by hand (`squat`, as any login may, with no
    heartbeat: as 0.1.0's scheduler did) or not at all: what it decides without holding
    the key must fail."""

    def session_of(self, step: str) -> Session:
        return self.lock if step == "squat" else super().session_of(step)

    def step_squat(self) -> Plan:
        self._sessions_up()
        return self.lock, lambda c: c.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]


class Runner(Actor):
    """A runner: claims, heartbeats and finishes (or releases) the runs it holds. It
    keeps its tokens after a lease is lost, so that a fenced call is sent too."""

    def __init__(self, name: str, dsn: str):
        super().__init__(name)
        self.conn = self.session("conn", dsn, "scrinalia-runner")
        self.held: list[tuple[int, Any]] = []

    def reset(self) -> None:
        super().reset()
        self.held = []

    def local_state(self) -> tuple:
        return tuple(r for r, _ in self.held)

    def step_claim(self) -> Plan:
        def run(c: psycopg.Connection) -> list[tuple[int, Any]]:
            cur = c.cursor(row_factory=dict_row)
            return [
                (r["run_id"], r["lease_token"]) for r in cur.execute(runner_sql.CLAIM_RUNS, (self.name, LEASE, None, 2))
            ]

        return self.conn, run

    def _batch(self) -> tuple[list[int], list[Any]]:
        return [r for r, _ in self.held], [t for _, t in self.held]

    def step_heartbeat(self) -> Plan:
        ids, tokens = self._batch()
        return self.conn, (lambda c: c.execute(runner_sql.HEARTBEAT_RUNS, (ids, tokens)).fetchall()) if ids else None

    def _finish(self, status: str) -> Plan:
        ids, tokens = self._batch()
        if not ids:
            return self.conn, None
        return self.conn, lambda c: c.execute(
            runner_sql.FINISH_RUNS, (ids, tokens, [status] * len(ids), None, None)
        ).fetchall()

    def step_finish_ok(self) -> Plan:
        return self._finish("SUCCEEDED")

    def step_finish_fail(self) -> Plan:
        return self._finish("FAILED")

    def step_release(self) -> Plan:
        ids, tokens = self._batch()
        return self.conn, (lambda c: c.execute(runner_sql.RELEASE_RUNS, (ids, tokens)).fetchall()) if ids else None

    def done(self, step: str, outcome: Outcome) -> None:
        if step == "claim" and outcome[0] == "ok":
            self.held += outcome[1]
        elif step in ("finish_ok", "finish_fail", "release") and outcome[0] != "skipped":
            self.held = []


class Squatter(Actor):
    """A reader login on the scheduler's key: waits for it in the lock's queue, or tries
    it; reconnects when its session was ended (an eviction), and takes it again."""

    def __init__(self, name: str, dsn: str):
        super().__init__(name)
        self.conn = self.session("conn", dsn, "squatter")

    def step_squat(self) -> Plan:
        return self.conn, lambda c: c.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]

    def step_try_squat(self) -> Plan:
        return self.conn, lambda c: c.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]

    def step_unsquat(self) -> Plan:
        return self.conn, lambda c: c.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,)).fetchone()[0]


class Operator(Actor):
    """An operator: a manual run, its cancel, a schedule replaced, paused and resumed,
    by the command line's statements. `live_run` names the run a cancel is for (the
    operator reads it in `runs`; the harness reads it for it)."""

    def __init__(self, name: str, dsn: str, worker: str, live_run: Any):
        super().__init__(name)
        self.conn = self.session("conn", dsn, "scrinalia-workers")
        self.worker = worker
        self.live_run = live_run
        self.open_transaction = False

    def step_enqueue(self) -> Plan:
        return self.conn, lambda c: c.execute(cli_sql.ENQUEUE, (self.worker, Jsonb({}), self.name)).fetchone()[0]

    def step_cancel(self) -> Plan:
        run_id = self.live_run(self.worker)
        if run_id is None:
            return self.conn, None
        return self.conn, lambda c: c.execute(cli_sql.CANCEL_RUN, (run_id, self.name)).fetchone()[0]

    def step_put_schedule(self) -> Plan:
        return self.conn, lambda c: c.execute(
            cli_sql.PUT_SCHEDULE, (self.worker, OTHER_CRON, "UTC", Jsonb({}), True, self.name)
        ).fetchone()

    # a careless client: BEGIN, an enqueue, and the transaction left open until COMMIT
    def step_begin(self) -> Plan:
        return self.conn, lambda c: c.execute("BEGIN")

    def step_commit(self) -> Plan:
        return self.conn, (lambda c: c.execute("COMMIT")) if self.open_transaction else None

    def done(self, step: str, outcome: Outcome) -> None:
        if step == "begin":
            self.open_transaction = outcome[0] == "ok"
        elif outcome[0] in ("lost", "error") or step == "commit":
            self.open_transaction = False  # (an error in it: the session rolled it back)

    def reset(self) -> None:
        super().reset()
        self.open_transaction = False

    def local_state(self) -> tuple:
        return (self.open_transaction,)

    def step_pause(self) -> Plan:
        return self.conn, lambda c: c.execute(cli_sql.SET_SCHEDULE_ENABLED, (self.worker, False, self.name)).fetchone()

    def step_resume(self) -> Plan:
        return self.conn, lambda c: c.execute(cli_sql.SET_SCHEDULE_ENABLED, (self.worker, True, self.name)).fetchone()


# The clock's steps: stored instants moved as the tests move them (the database's now()
# is the clock), each standing for a span of time passed or a clock step.
CLOCK = {
    # every lease runs out (a runner frozen, a lost connection)
    "leases_expire": (
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second'"
        " WHERE status = 'RUNNING' RETURNING NULL, NULL"
    ),
    # the armed period of every enabled schedule comes (a new period, due 30 s ago)
    "period_passes": (
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '30 seconds'"
        " WHERE enabled AND next_run_at > now() RETURNING worker_name, next_run_at"
    ),
    # every retry's backoff has passed (its creation moved back with it)
    "retry_due": (
        "UPDATE scrinalia.archive_worker_runs"
        " SET created_at = created_at - (not_before - now() + interval '1 second'),"
        " not_before = now() - interval '1 second'"
        " WHERE status = 'QUEUED' AND not_before > now() RETURNING NULL, NULL"
    ),
    # the holder's heartbeat is stale (a frozen scheduler, a clock stepped ahead)
    "heartbeat_stale": (
        "UPDATE scrinalia.scheduler_state"
        " SET heartbeat_at = heartbeat_at - scrinalia.scheduler_stale_after() - interval '1 second'"
        " WHERE heartbeat_at IS NOT NULL RETURNING NULL, NULL"
    ),
}


class Fault(Actor):
    """The faults, from a superuser session: `crash.<actor>.<session>` ends that session
    (pg_terminate_backend: a crash, kill -9, a lost connection), `clock.<kind>` moves
    stored instants (CLOCK). `pid_of` names the server pid of an actor's session."""

    def __init__(self, name: str, dsn: str, pid_of: Any):
        super().__init__(name)
        self.conn = self.session("conn", dsn, "explore-fault")
        self.pid_of = pid_of

    def plan(self, step: str) -> Plan:
        kind, _, what = step.partition(".")
        if kind == "clock":
            statement = CLOCK[what]
            return self.conn, lambda c: c.execute(statement).fetchall()
        pid = self.pid_of(what)
        if pid is None:
            return self.conn, None  # that session is not open: nothing to end

        def crash(c: psycopg.Connection) -> bool:
            ended = c.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
            # until it is gone, and its locks with it
            while c.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                c.execute("SELECT pg_sleep(0.001)")
            return bool(ended)

        return self.conn, crash
