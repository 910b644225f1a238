"""The soak's faults: a seeded timetable, and how each kind is injected.

Two lanes run side by side, each fault of a lane after the one before it has ended:
the daemons' lane (kill -9, SIGSTOP/SIGCONT, a clock step under faketime, a handler
that hangs) and the database's lane (a PostgreSQL restart, a failover to the streaming
replica, squatters on the scheduler's lock, a careless open transaction). The
timetable is drawn from the seed alone: each kind once early (in a drawn order), then
kinds at random; the targets of kill -9 and SIGSTOP go round every daemon.
"""

from __future__ import annotations

import random
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from scrinalia_workers.testkit.cluster import LocalCluster
from scrinalia_workers.testkit.waiting import wait_for

DAEMON_KINDS = ("kill -9", "sigstop", "clock step", "hang")
DATABASE_KINDS = ("pg restart", "failover", "squatter", "open transaction")
KINDS = DAEMON_KINDS + DATABASE_KINDS
WARM_UP = 20.0  # seconds of plain load before the first fault
COOL_DOWN = 30.0  # seconds before the end with no new fault
GAP = (4.0, 12.0)  # seconds between one fault's end and the next's start, drawn
STOP_SECONDS = (2.0, 12.0)
CLOCK_STEPS = (90, -90, 600)  # seconds faketime moves a daemon's clock
CLOCK_SECONDS = (15.0, 40.0)
SQUAT_SECONDS = (5.0, 20.0)
OPEN_TRANSACTION_SECONDS = (10.0, 40.0)
OUTAGE_SECONDS = (0.5, 3.0)  # no writable node between the primary's death and the promotion
HANG_EXIT_WITHIN = 120.0  # a hung runner's exit: the next claim, its max run time, a reap, its grace
# A runner whose every handler thread is hung must exit 3 within HANG_EXIT_WITHIN, also
# when the hung handlers hold runs of a batch it dropped after a database error (found
# by this soak, fixed: Supervision.orphans); one that goes on is a problem of the run.
HUNG_RUNNER_LIVES = "runner still running after its handlers were hung, not exiting 3"
# the short faults come more often: every daemon killed and frozen in a long enough run
WEIGHT = {"kill -9": 3, "sigstop": 2, "pg restart": 2}
# rough lengths, to plan the timetable (a lane waits for each fault to end anyway)
EXPECTED = {"kill -9": 1.0, "pg restart": 3.0, "failover": 15.0, "hang": 30.0}
# the database's settings for the soak: commits are durable on the primary (only an
# asynchronous replica's lag can lose one, at a failover), WAL kept for pg_basebackup
NODE_SETTINGS = {"synchronous_commit": "on", "wal_keep_size": "'256MB'"}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start, as planned (a lane starts it no earlier)
    kind: str
    target: str  # a daemon's slot, or "" for the database's faults
    seconds: float  # how long it lasts (SIGSTOP, clock step, squat, open transaction; failover: the outage)
    detail: str = ""  # the clock step, the squatter's login

    def describe(self) -> str:
        parts = [self.kind, self.target, self.detail]
        if self.seconds:
            parts.append(f"for {self.seconds:.1f} s")
        return " ".join(p for p in parts if p)


def timetable(seed: int, minutes: float, daemons: list[str], runners: list[str]) -> list[Fault]:
    """The faults of a run of `minutes`, from the seed alone, in order of planned start."""
    rng = random.Random(seed)
    end = minutes * 60 - COOL_DOWN
    out: list[Fault] = []
    rounds = {k: [] for k in ("kill -9", "sigstop")}  # type: dict[str, list[str]]

    def target(kind: str) -> str:
        if kind == "hang":
            return rng.choice(runners)
        if kind == "clock step":
            return rng.choice(daemons)
        if kind in rounds:
            if not rounds[kind]:
                rounds[kind] = rng.sample(daemons, len(daemons))
            return rounds[kind].pop()
        return ""

    def draw(kind: str, at: float) -> Fault:
        tgt = target(kind)
        if kind == "sigstop":
            return Fault(at, kind, tgt, round(rng.uniform(*STOP_SECONDS), 1))
        if kind == "clock step":
            step = rng.choice(CLOCK_STEPS)
            return Fault(at, kind, tgt, round(rng.uniform(*CLOCK_SECONDS), 1), f"{step:+d}s")
        if kind == "squatter":
            return Fault(
                at, kind, "", round(rng.uniform(*SQUAT_SECONDS), 1), f"{rng.randint(1, 3)}x {rng.choice(SQUATTERS)}"
            )
        if kind == "open transaction":
            return Fault(at, kind, "", round(rng.uniform(*OPEN_TRANSACTION_SECONDS), 1))
        if kind == "pg restart":
            return Fault(at, kind, "", 0.0, rng.choice(("-m fast", "-m immediate")))
        if kind == "failover":
            return Fault(at, kind, "", round(rng.uniform(*OUTAGE_SECONDS), 1))
        return Fault(at, kind, tgt, 0.0)

    for kinds in (DAEMON_KINDS, DATABASE_KINDS):
        t = WARM_UP + rng.uniform(0, GAP[1])
        first = rng.sample(kinds, len(kinds))
        weights = [WEIGHT.get(k, 1) for k in kinds]
        while t < end:
            f = draw(first.pop() if first else rng.choices(kinds, weights)[0], round(t, 1))
            out.append(f)
            t += f.seconds + EXPECTED.get(f.kind, 0.0) + rng.uniform(*GAP)
    return sorted(out, key=lambda f: f.at)


SQUATTERS = ("nobody", "reader")  # the logins a squatter uses: one in no group, a reader


class Nodes:
    """A primary and its streaming replica (pg_basebackup -R), on two ports that stay
    the same through failovers: the dead primary's port is given to the new replica."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.primary = LocalCluster(bin_dir, settings=NODE_SETTINGS).start()
        self.replica: LocalCluster | None = None
        self.ports = (self.primary.port, 0)
        self.failovers = 0

    def start_replica(self) -> None:
        self.replica = self.primary.start_replica(port=self.ports[1] or None, settings=NODE_SETTINGS)
        self.ports = (self.ports[0], self.replica.port)
        self._await_streaming()

    def _await_streaming(self) -> None:
        with psycopg.connect(self.primary.dsn(), autocommit=True) as c:
            wait_for(
                lambda: (
                    c.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()[0] == 1
                ),
                timeout=60,
                what="the replica streaming",
            )

    def dsn(self, user: str, dbname: str) -> str:
        """One libpq string naming both nodes; libpq picks the one that takes writes."""
        ports = ",".join(str(p) for p in self.ports)
        return f"host=127.0.0.1,127.0.0.1 port={ports} user={user} dbname={dbname} target_session_attrs=read-write"

    def restart(self, mode: str) -> None:
        """pg_ctl restart of the primary, `-m fast` or `-m immediate` (a crash)."""
        self.primary.pg_ctl("restart", "-w", "-t", "60", *mode.split(), "-l", str(self.primary.logfile))

    def failover(self, outage: float) -> None:
        """The primary dies hard, the replica is promoted `outage` seconds later, and the
        dead primary's port gets a new replica of the new primary."""
        assert self.replica is not None
        dead = self.primary
        dead.kill()
        time.sleep(outage)  # no writable node: the daemons retry against a read-only one
        self.replica.promote()
        self.primary, self.replica = self.replica, None
        dead.stop()
        self.ports = (self.primary.port, dead.port)
        self.start_replica()
        self.failovers += 1

    def stop(self) -> None:
        for n in (self.primary, self.replica):
            if n is not None:
                n.stop()


def _ended(c: psycopg.Connection) -> bool:
    """Whether the server ended the session, seen without sending a statement."""
    readable, _, _ = select.select([c.pgconn.socket], [], [], 0)
    if not readable:
        return False
    try:
        c.pgconn.consume_input()
    except psycopg.OperationalError:
        return True
    return c.pgconn.status != psycopg.pq.ConnStatus.OK


class Squatter(threading.Thread):
    """Tries the scheduler's lock key every TRY_EVERY seconds, sits idle on it once it has
    it until its session is ended, and reconnects at once, until `stop` is set."""

    TRY_EVERY = 0.01

    def __init__(self, dsn: str, key: int, stop: threading.Event):
        super().__init__(daemon=True, name="soak squatter")
        self.dsn, self.key, self.stop = dsn, key, stop
        self.grabs = 0
        self.sessions = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, application_name="soak squatter") as c:
                    self.sessions += 1
                    while not c.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]:
                        if self.stop.wait(self.TRY_EVERY):
                            return
                    self.grabs += 1
                    while not self.stop.is_set() and not _ended(c):
                        self.stop.wait(0.02)
            except psycopg.Error:
                self.stop.wait(0.05)


class Injector:
    """Injects one fault at a time per lane; each injection is logged with its instant."""

    def __init__(
        self,
        slots: dict,
        nodes: Nodes,
        admin: Callable[[], psycopg.Connection],
        login_dsn: Callable[[str], str],
        lock_key: int,
        control: Path,
        say: Callable[[str], None],
    ):
        self.slots, self.nodes, self.admin, self.login_dsn = slots, nodes, admin, login_dsn
        self.lock_key, self.control, self.say = lock_key, control, say
        self.db_lock = threading.Lock()  # the database's faults and the soak's own reads of a node
        self.done: list[tuple[Fault, str]] = []
        self.problems: list[str] = []
        self.abort = threading.Event()

    def lane(self, faults: list[Fault], t0: float) -> None:
        for f in faults:
            if self.abort.wait(max(0.0, t0 + f.at - time.monotonic())):
                return
            self.say(f"fault: {f.describe()}")
            try:
                outcome = getattr(self, "_" + f.kind.replace(" ", "_").replace("-", ""))(f)
            except Exception as e:  # the soak goes on; the fault that could not be injected is a finding
                outcome = f"not injected: {type(e).__name__}: {e}"
                self.problems.append(f"{f.describe()}: {outcome}")
            self.done.append((f, outcome or ""))
            if outcome:
                self.say(f"  {f.kind}: {outcome}")

    # -- the daemons' lane -----------------------------------------------------------

    def _kill_9(self, f: Fault) -> str:
        self.slots[f.target].signal(signal.SIGKILL)
        return ""

    def _sigstop(self, f: Fault) -> str:
        slot = self.slots[f.target]
        slot.signal(signal.SIGSTOP)
        time.sleep(f.seconds)
        slot.signal(signal.SIGCONT)
        return ""

    def _clock_step(self, f: Fault) -> str:
        slot = self.slots[f.target]
        slot.restart_with_clock(int(f.detail.rstrip("s")))
        time.sleep(f.seconds)
        slot.restart_with_clock(0)
        return ""

    def _hang(self, f: Fault) -> str:
        slot = self.slots[f.target]
        with slot.lock:
            inc = slot.current
        flag = self.control / f"hang-{inc.proc.pid}"
        flag.touch()
        inc.hung_by_us = True
        started = time.monotonic()
        try:
            while inc.proc.popen.poll() is None:
                if time.monotonic() - started > HANG_EXIT_WITHIN:
                    self.problems.append(f"{f.describe()}: {HUNG_RUNNER_LIVES} ({HANG_EXIT_WITHIN:.0f} s)")
                    return "still running"
                time.sleep(0.2)
        finally:
            flag.unlink(missing_ok=True)
        return f"exited with {inc.proc.popen.returncode} after {time.monotonic() - started:.1f} s"

    # -- the database's lane -----------------------------------------------------------

    def _pg_restart(self, f: Fault) -> str:
        with self.db_lock:
            self.nodes.restart(f.detail)
        return ""

    def _failover(self, f: Fault) -> str:
        took = time.monotonic()
        with self.db_lock:
            self.nodes.failover(f.seconds)
        return f"new primary on port {self.nodes.ports[0]}, replica rebuilt, {time.monotonic() - took:.1f} s"

    def _squatter(self, f: Fault) -> str:
        """Squatters try the key; then the schedulers' sessions are ended (lost
        connections: the holder's and the standby's, which waits in the key's queue), so
        that a squatter may get the key first, and the schedulers must take it back."""
        count, login = f.detail.split("x ")
        stop = threading.Event()
        squatters = [Squatter(self.login_dsn(login), self.lock_key, stop) for _ in range(int(count))]
        for s in squatters:
            s.start()
        wait_for(lambda: all(s.sessions for s in squatters), timeout=10, what="the squatters connected")
        with self.db_lock:
            ended = (
                self.admin()
                .execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'scrinalia-scheduler%'"
                )
                .fetchone()[0]
            )
        time.sleep(f.seconds)
        stop.set()
        with self.db_lock:
            self.admin().execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'soak squatter'"
            )
        for s in squatters:
            s.join(10)
        return (
            f"{ended} scheduler sessions ended; the squatters took the key {sum(s.grabs for s in squatters)} times"
            f" in {sum(s.sessions for s in squatters)} sessions"
        )

    def _open_transaction(self, f: Fault) -> str:
        with psycopg.connect(self.login_dsn("reader"), application_name="soak careless") as c:
            n = c.execute("SELECT count(*) FROM scrinalia.worker_agenda").fetchone()[0]
            time.sleep(f.seconds)  # BEGIN ... left open, idle in transaction
            try:
                c.rollback()
            except psycopg.Error:
                return f"read {n} agenda rows; its session did not survive"
        return f"read {n} agenda rows, held open"
