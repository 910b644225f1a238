"""Start and stop the real scheduler and runner processes, and await their log events.

    p = start_scheduler(dsn, "--standby-retry", "1")
    p.wait_event("lock acquired", timeout=10)
    stop(p)   # SIGTERM, then returns the exit code
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent


class Proc:
    """A child process whose JSON log lines (stderr) are collected by a thread."""

    def __init__(self, args: list[str]):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        self.popen = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=env)
        self.pid = self.popen.pid
        self.events: list[dict] = []
        self.raw: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.popen.stderr:
            with self._cond:
                self.raw.append(line)
                try:
                    ev = json.loads(line)
                    if isinstance(ev, dict):
                        self.events.append(ev)
                except ValueError:
                    pass
                self._cond.notify_all()

    def wait_event(self, event: str, timeout: float = 10.0, since: int = 0, **fields) -> dict:
        """The first event named `event` (index >= since) matching fields, or AssertionError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self.events[since:]:
                    if ev.get("event") == event and all(ev.get(k) == v for k, v in fields.items()):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not self._more()):
                    raise AssertionError(f"no {event!r} {fields or ''} within {timeout}s; log:\n"
                                         + "".join(self.raw[-30:]))
                self._cond.wait(min(left, 0.1))

    def _more(self) -> bool:
        return not self.popen.stderr.closed and self.popen.poll() is None

    def count(self, event: str, **fields) -> int:
        with self._cond:
            return sum(1 for ev in self.events if ev.get("event") == event
                       and all(ev.get(k) == v for k, v in fields.items()))

    def mark(self) -> int:
        with self._cond:
            return len(self.events)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.popen.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError("process did not stop on SIGTERM")


def start_scheduler(dsn: str, *args: str) -> Proc:
    return Proc([sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", dsn, "--json", *args])


def start_runner(dsn: str, handlers_module: str = "demo_handlers", *args: str) -> Proc:
    return Proc([sys.executable, "-m", "scrinalia_workers.runner", "--dsn", dsn, "--json",
                 "--handlers", handlers_module, *args])


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Polls predicate() until it returns a truthy value; returns it, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)
