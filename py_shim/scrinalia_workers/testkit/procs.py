"""Start and stop the real scheduler and runner processes, and await their log events.

    p = start_scheduler(dsn, "--standby-retry", "1")
    p.wait_event("lock acquired", timeout=10)
    p.stop()   # SIGTERM, then returns the exit code

`Procs` keeps every process a test started and ends those still running when the
test ends (the `procs` fixture of tests/conftest.py): no test writes kill-in-finally.
Children inherit this process's environment, PYTHONPATH included (the tests put
their own handler modules on it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time


class Proc:
    """A child process whose JSON log lines (stderr) are collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.popen = subprocess.Popen(
            args, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {}))
        )
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
                    raise AssertionError(
                        f"no {event!r} {fields or ''} within {timeout}s; log:\n" + "".join(self.raw[-30:])
                    )
                self._cond.wait(min(left, 0.1))

    def _more(self) -> bool:
        return not self.popen.stderr.closed and self.popen.poll() is None

    def count(self, event: str, **fields) -> int:
        with self._cond:
            return sum(
                1 for ev in self.events if ev.get("event") == event and all(ev.get(k) == v for k, v in fields.items())
            )

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
            raise AssertionError("process did not stop on SIGTERM") from None


def start_scheduler(dsn: str, *args: str) -> Proc:
    return Proc([sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", dsn, "--json", *args])


def start_runner(dsn: str, handlers_module: str = "demo_handlers", *args: str) -> Proc:
    return Proc(
        [sys.executable, "-m", "scrinalia_workers.runner", "--dsn", dsn, "--json", "--handlers", handlers_module, *args]
    )


class Procs:
    """The processes one test started; end() stops whatever still runs (resumed first, in
    case the test froze it with SIGSTOP), so a failing test leaves no daemon behind."""

    def __init__(self) -> None:
        self.started: list[Proc] = []

    def append(self, p: Proc) -> Proc:
        self.started.append(p)
        return p

    def start(self, args: list[str], env: dict[str, str] | None = None) -> Proc:
        return self.append(Proc(args, env))

    def scheduler(self, dsn: str, *args: str) -> Proc:
        return self.append(start_scheduler(dsn, *args))

    def runner(self, dsn: str, handlers_module: str = "demo_handlers", *args: str) -> Proc:
        return self.append(start_runner(dsn, handlers_module, *args))

    def end(self) -> None:
        for p in self.started:
            if p.popen.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.popen.kill()
            p.popen.wait()
