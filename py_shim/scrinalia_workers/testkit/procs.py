"""Start and stop the real scheduler and runner processes, and await their log events.

    p = start_scheduler(dsn, "--standby-retry", "1")
    p.wait_event("lock acquired", timeout=10)
    p.stop()   # SIGTERM, then returns the exit code

`Procs` keeps every process a test or a benchmark started and ends those still
running when it is done (the `procs` fixture of tests/conftest.py, or `with Procs()`):
no caller writes kill-in-finally. Children inherit this process's environment,
PYTHONPATH included (the tests put their own handler modules on it).

A Proc reads its child's log lines (stderr; or stdout, or both, for a program that
writes its story there) in a thread; with `log=path` the child writes both streams to
that file instead and nothing is read, so a benchmark's reader costs the machine
nothing. With group=True it runs in a session of its own and every signal Proc sends
goes to that whole process group (a shell and what it execs or spawns).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

READ_AFTER_EXIT = 5.0  # seconds wait() gives the reader to reach the end of an exited child's output


class Proc:
    """A child process whose JSON log lines are collected by a thread. Each event
    carries `_mono`, the time.monotonic() at which it was read."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str] | None = None,
        *,
        log: Path | None = None,
        lines: str = "stderr",
        new_session: bool = False,
        group: bool = False,
        inherit_env: bool = True,
        unset: Iterable[str] = (),
        terminal: int | None = None,
    ):
        self.args = list(args)
        self.log = log
        self.group = group
        self.events: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._cond = threading.Condition()
        self._eof = log is not None or terminal is not None
        self._logfile: IO[str] | None = None
        streams: dict[str, Any]
        if terminal is not None:  # a pseudo-terminal's end: the test reads what it shows
            streams = {"stdin": terminal, "stdout": terminal, "stderr": terminal}
        elif log is not None:
            self._logfile = open(log, "w")
            streams = {"stdout": self._logfile, "stderr": subprocess.STDOUT}
        elif lines == "stdout":
            streams = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
        elif lines == "stderr":
            streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        elif lines == "both":
            streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        else:
            raise ValueError(f"lines must be 'stderr', 'stdout' or 'both', not {lines!r}")
        dropped = set(unset)
        inherited = {k: v for k, v in os.environ.items() if k not in dropped} if inherit_env else {}
        self.popen = subprocess.Popen(
            self.args,
            text=True,
            env={**inherited, **(env or {})},
            start_new_session=new_session or group,
            **streams,
        )
        self.pid = self.popen.pid
        self._reader: threading.Thread | None = None
        if log is None and terminal is None:
            stream = self.popen.stderr if lines == "stderr" else self.popen.stdout
            assert stream is not None
            self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
            self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self.raw.append(line)
                try:
                    ev = json.loads(line)
                    if isinstance(ev, dict):
                        ev["_mono"] = time.monotonic()
                        self.events.append(ev)
                except ValueError:
                    pass
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    @staticmethod
    def _matches(ev: dict[str, Any], names: tuple[str, ...], after: float, fields: dict[str, Any]) -> bool:
        return ev.get("event") in names and ev["_mono"] >= after and all(ev.get(k) == v for k, v in fields.items())

    def wait_event(
        self, event: str | Iterable[str], timeout: float = 10.0, since: int = 0, after: float = 0.0, **fields: Any
    ) -> dict[str, Any]:
        """The first event named `event` (or any of several names) at index >= since,
        read at time.monotonic() >= after, matching fields; or AssertionError once the
        timeout passes or the process's log has ended without it."""
        if self.log is not None:
            raise TypeError("a Proc that logs to a file reads no events")
        names = (event,) if isinstance(event, str) else tuple(event)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self.events[since:]:
                    if self._matches(ev, names, after, fields):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    raise AssertionError(f"no {event!r} {fields or ''} within {timeout}s; log:\n" + self.tail())
                self._cond.wait(min(left, 0.1))

    def has(self, event: str, after: float = 0.0, **fields: Any) -> bool:
        with self._cond:
            return any(self._matches(ev, (event,), after, fields) for ev in self.events)

    def count(self, event: str, **fields: Any) -> int:
        with self._cond:
            return sum(1 for ev in self.events if self._matches(ev, (event,), 0.0, fields))

    def mark(self) -> int:
        with self._cond:
            return len(self.events)

    def tail(self, lines: int = 30) -> str:
        """The last lines the process wrote (its log file's, when it has one)."""
        if self.log is not None:
            text = self.log.read_text() if self.log.exists() else ""
            return "".join(text.splitlines(keepends=True)[-lines:])
        with self._cond:
            return "".join(self.raw[-lines:])

    def running(self) -> bool:
        return self.popen.poll() is None

    def exit_reason(self) -> str | None:
        """None while it runs; else how it ended, with its last lines (for testkit.waiting.wait_for)."""
        code = self.popen.poll()
        if code is None:
            return None
        return f"{' '.join(self.args[1:4])} exited with {code}:\n{self.tail()}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Sends sig (SIGKILL unless told) to the process, or to its group with group=True."""
        if self.group:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
        else:
            self.popen.send_signal(sig)

    def terminate(self) -> None:
        """SIGTERM, resumed first in case it was frozen with SIGSTOP (a stopped process
        acts on SIGTERM only once it runs again)."""
        if self.popen.poll() is None:
            self.kill(signal.SIGCONT)
            self.kill(signal.SIGTERM)

    def wait(self, timeout: float = 15.0) -> int:
        """Its exit code, once its last lines are read; if it has not exited within
        timeout, SIGKILL and AssertionError."""
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.popen.wait()
            raise AssertionError(f"process did not stop on SIGTERM within {timeout}s") from None
        finally:
            if self._logfile is not None and self.popen.poll() is not None:
                self._logfile.close()
        if self._reader is not None:
            self._reader.join(READ_AFTER_EXIT)  # a child it left holding the pipe must not hold us
        return code

    def stop(self, timeout: float = 15.0) -> int:
        self.terminate()
        return self.wait(timeout)


def scheduler_argv(dsn: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", dsn, "--json", *args]


def runner_argv(dsn: str, handlers_module: str = "demo_handlers", *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scrinalia_workers.runner",
        "--dsn",
        dsn,
        "--json",
        "--handlers",
        handlers_module,
        *args,
    ]


def start_scheduler(dsn: str, *args: str, **kw: Any) -> Proc:
    return Proc(scheduler_argv(dsn, *args), **kw)


def start_runner(dsn: str, handlers_module: str = "demo_handlers", *args: str, **kw: Any) -> Proc:
    return Proc(runner_argv(dsn, handlers_module, *args), **kw)


class Procs:
    """The processes one test (or benchmark) started; end() stops whatever still runs
    (resumed first, in case it was frozen with SIGSTOP), so a failure leaves no daemon
    behind. Keyword arguments of start(), scheduler() and runner() go to Proc."""

    def __init__(self) -> None:
        self.started: list[Proc] = []

    def append(self, p: Proc) -> Proc:
        self.started.append(p)
        return p

    def start(self, args: list[str], env: dict[str, str] | None = None, **kw: Any) -> Proc:
        return self.append(Proc(args, env, **kw))

    def scheduler(self, dsn: str, *args: str, **kw: Any) -> Proc:
        return self.append(start_scheduler(dsn, *args, **kw))

    def runner(self, dsn: str, handlers_module: str = "demo_handlers", *args: str, **kw: Any) -> Proc:
        return self.append(start_runner(dsn, handlers_module, *args, **kw))

    def stop_all(self, which: Iterable[Proc] | None = None, timeout: float = 15.0) -> list[int | str]:
        """SIGTERMs every process (those given, else all started) at once, then waits
        for each; returns their exit codes in order, or for one that had to be killed
        the failure text. One that does not stop keeps none of the others running."""
        ps = list(self.started if which is None else which)
        for p in ps:
            p.terminate()
        codes: list[int | str] = []
        for p in ps:
            try:
                codes.append(p.wait(timeout))
            except AssertionError as e:
                codes.append(str(e))
        return codes

    def end(self) -> None:
        for p in self.started:
            if p.popen.poll() is None:
                try:
                    p.kill(signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()
            p.popen.wait()
            if p._logfile is not None:
                p._logfile.close()

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()
