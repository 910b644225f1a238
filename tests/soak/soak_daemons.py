"""The soak's daemons, each in a slot that starts it again when it exits, as compose's
`restart:` does, and counts those restarts by exit code.

Each daemon runs in a process group of its own (a clock-stepped one runs under
Debian's `faketime`, which forks), so that SIGKILL, SIGSTOP and SIGCONT reach the
daemon itself. Each incarnation logs to a file of its own under the soak's directory.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from scrinalia_workers.testkit.procs import Proc, runner_argv, scheduler_argv

RESTART_DELAY = 1.0  # seconds a supervisor waits before starting an exited daemon again
STOP_TIMEOUT = 30.0  # a SIGTERM'd runner gives its handlers --grace first
RUNNER_LEASE = "5"
RUNNER_GRACE = "5"
STUCK_EXIT = 3  # a runner whose every handler thread is held (runner/command.py)
READY = {"runner": ("runner started",), "scheduler": ("lock acquired", "standby")}


@dataclass
class Incarnation:
    proc: Proc
    log: Path
    started: float  # time.monotonic()
    clock_offset: int  # seconds faketime moved its clock (0: the real clock)
    code: int | None = None
    ended: float | None = None
    killed_by_us: bool = False  # a kill -9 fault: its exit is expected
    hung_by_us: bool = False  # a hang fault: its exit 3 is expected
    restarted: bool = False  # started again by the supervisor (not stopped by the soak)
    usage: list[tuple[float, int, int]] = field(default_factory=list)  # (monotonic, fds, RSS KiB)


@dataclass
class Slot:
    name: str  # s1, s2, r1, r2, r3
    kind: str  # scheduler | runner
    dsn: str
    logdir: Path
    env: dict[str, str]
    incarnations: list[Incarnation] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    down_since: float | None = None
    retired: bool = False  # stopped for good at the end: not started again

    @property
    def current(self) -> Incarnation:
        return self.incarnations[-1]

    def argv(self) -> list[str]:
        if self.kind == "scheduler":
            return scheduler_argv(self.dsn, "--standby-retry", "0.5", "--max-sleep", "1", "--name", self.name)
        return runner_argv(
            self.dsn, "soak_handlers", "--lease", RUNNER_LEASE, "--grace", RUNNER_GRACE, "--runner-id", self.name
        )

    def start(self, clock_offset: int = 0) -> Incarnation:
        """A new incarnation (call with the lock held, or before the supervisor runs)."""
        argv = self.argv()
        if clock_offset:
            argv = ["faketime", "-f", f"{clock_offset:+d}s", *argv]
        log = self.logdir / f"{self.name}-{len(self.incarnations) + 1:03d}.log"
        inc = Incarnation(Proc(argv, self.env, log=log, group=True), log, time.monotonic(), clock_offset)
        self.incarnations.append(inc)
        self.down_since = None
        return inc

    def ready(self) -> bool:
        """Whether the current incarnation runs and has said it started (a runner) or
        that it holds the lock or stands by (a scheduler)."""
        inc = self.current
        if inc.proc.popen.poll() is not None or not inc.log.exists():
            return False
        text = inc.log.read_text(errors="replace")
        return any(f'"event": "{e}"' in text for e in READY[self.kind])

    def restart_with_clock(self, clock_offset: int) -> Incarnation:
        """Stops the daemon (SIGTERM) and starts it again with its clock moved."""
        with self.lock:
            inc = self.current
            inc.killed_by_us = True  # a stop the soak asked for
            try:
                inc.code = inc.proc.stop(STOP_TIMEOUT)
            except AssertionError:
                inc.code = inc.proc.popen.wait()
            _await_group_gone(inc.proc.pid)
            inc.ended = time.monotonic()
            return self.start(clock_offset)

    def signal(self, sig: int) -> None:
        with self.lock:
            inc = self.current
            if sig == signal.SIGKILL:
                inc.killed_by_us = True
            inc.proc.kill(sig)

    def supervise(self, now: float) -> None:
        """Starts the daemon again RESTART_DELAY after it exited."""
        with self.lock:
            inc = self.current
            code = inc.proc.popen.poll()
            if code is None or self.retired:
                return
            if inc.code is None:
                inc.code, inc.ended = code, now
            if self.down_since is None:
                self.down_since = now
            if now - self.down_since >= RESTART_DELAY:
                _await_group_gone(inc.proc.pid)
                inc.restarted = True
                self.start()

    def stop(self) -> int | str:
        """Stops the daemon for good (SIGTERM): its exit code, or why it had to be killed."""
        with self.lock:
            self.retired = True
            inc = self.current
            inc.killed_by_us = True
            try:
                inc.code = inc.proc.stop(STOP_TIMEOUT)
            except AssertionError as e:
                return str(e)
            _await_group_gone(inc.proc.pid)
            inc.ended = time.monotonic()
            return inc.code

    def restarts(self) -> Counter[str]:
        """The exits the supervisor restarted, by how they ended."""
        out: Counter[str] = Counter()
        for inc in self.incarnations:
            if inc.restarted:
                out[describe_exit(inc)] += 1
        return out

    def clock_steps(self) -> int:
        return sum(1 for inc in self.incarnations if inc.clock_offset)

    def unexpected_exits(self) -> list[str]:
        """Exits no fault explains: a traceback, a misconfiguration, a scheduler's exit 3."""
        out = []
        for i, inc in enumerate(self.incarnations):
            if inc.code is None or inc.killed_by_us:
                continue
            if self.kind == "runner" and inc.code == STUCK_EXIT:
                continue  # the designed way out of held handler threads (a hang, or a run past its limit)
            out.append(f"{self.name} incarnation {i + 1} exited with {inc.code} unasked: see {inc.log}")
        return out


def _await_group_gone(pgid: int, timeout: float = STOP_TIMEOUT) -> None:
    """Until no process of the group is left (faketime's child outlives faketime)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)


def describe_exit(inc: Incarnation) -> str:
    if inc.code is not None and inc.code < 0:
        return f"signal {signal.Signals(-inc.code).name}"
    return f"exit {inc.code}"


def resources(pid: int) -> tuple[int, int] | None:
    """(open file descriptors, resident set KiB) of a live process; None once it is gone."""
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return fds, rss
    except (OSError, StopIteration):
        return None


class Supervisor(threading.Thread):
    """Every POLL seconds, starts again each slot's daemon that exited."""

    POLL = 0.2

    def __init__(self, slots: list[Slot]):
        super().__init__(daemon=True, name="soak supervisor")
        self.slots = slots
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.POLL):
            for s in self.slots:
                s.supervise(time.monotonic())
