"""One line per decision: plain `ts event key=value ...` or, with --json, a JSON object."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from datetime import UTC, datetime

from scrinalia_workers.text import _ACTING, for_terminal

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
# json.dumps(default=...) builds an encoder per call; the daemons write a line per run
_ENCODER = json.JSONEncoder(default=str)
# what for_terminal() escapes but a newline: whether a text of many lines needs it at all
_ACTS_BUT_NEWLINE = re.compile(_ACTING.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f", 1))
# the same for an ASCII text (the usual one), a far shorter class to look for
_ASCII_ACTS_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f]")


def json_line(ts: str, event: str, level: str, fields: dict) -> str:
    """A line as --json writes it (the one home of its fields' order and encoding)."""
    return _ENCODER.encode({"ts": ts, "event": event, "level": level, **fields})


def plain_line(ts: str, event: str, level: str, fields: dict) -> str:
    """A plain line before its escaping: `ts LEVEL event key=value ...`."""
    parts = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{ts} {level.upper()} {event}" + (f" {parts}" if parts else "")


class EventLog:
    def __init__(self, json_lines: bool = False, level: str = "info", stream=None):
        self.json_lines = json_lines
        self.threshold = LEVELS.get(level.lower(), 20)
        self.stream = stream or sys.stderr
        self._batched = 0
        # a Lines written from another thread goes out whole, never inside another line
        self._writing = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields) -> None:
        if LEVELS.get(level, 20) < self.threshold:
            return
        self.write_text(self._line(event, level, fields) + "\n")

    def _line(self, event: str, level: str, fields: dict) -> str:
        ts = stamp()
        if self.json_lines:
            return json_line(ts, event, level, fields)
        # a value read from the database may hold anything: nothing in it acts on a terminal,
        # and no newline in it forges a line of its own
        return for_terminal(plain_line(ts, event, level, fields), keep="")

    def write_text(self, text: str, *, flush: bool = False) -> None:
        """Whole lines, already formatted, written under the lock (another thread's
        lines never land inside them); flushed unless a batch() flushes later."""
        try:
            with self._writing:
                self.stream.write(text)
                if flush or not self._batched:
                    self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe must not stop the daemon

    def last_words(self, event: str, level: str = "warning", **fields) -> None:
        """A line written from a signal handler on the way out. It never waits for the
        lock: the code the signal interrupted may hold it, and would never let go.
        Without the lock it goes straight to the file descriptor, after a newline in
        case it lands behind half a line; a blocked write is the caller's to bound."""
        if LEVELS.get(level, 20) < self.threshold:
            return
        line = self._line(event, level, fields) + "\n"
        held = self._writing.acquire(blocking=False)
        try:
            if held:
                with contextlib.suppress(OSError, ValueError, RuntimeError):
                    self.stream.flush()  # the lines before it first (os._exit flushes nothing)
            try:
                fd = self.stream.fileno()
            except (OSError, ValueError, AttributeError):  # an in-memory stream
                if held:
                    self.stream.write(line)
                return
            os.write(fd, (line if held else "\n" + line).encode("utf-8", "backslashreplace"))
        except (OSError, ValueError, RuntimeError):
            pass  # leaving anyway
        finally:
            if held:
                self._writing.release()

    @contextlib.contextmanager
    def batch(self):
        """The lines written inside go out with one flush at the end: a tick's thousands
        of decisions cost one write to the pipe, not one each."""
        self._batched += 1
        try:
            yield
        finally:
            self._batched -= 1
            if not self._batched:
                try:
                    self.stream.flush()
                except (OSError, ValueError):
                    pass


class Lines:
    """Lines for `log`, collected by calls like the log's own and turned into one text
    by text(), which the caller writes (log.write_text): the same lines as one by one (each with the instant it was logged), with
    one escaping pass and one write for thousands of them. It touches no state of the
    log but its stream (under its lock), so another thread may fill and write it."""

    def __init__(self, log: EventLog):
        self.log = log
        self._records: list[tuple[float, str, str, dict]] = []

    def __call__(self, event: str, level: str = "info", **fields) -> None:
        if LEVELS.get(level, 20) >= self.log.threshold:
            self._records.append((time.time(), event, level, fields))

    def text(self) -> str:
        """The lines collected so far, in one text (and forgets them)."""
        records, self._records = self._records, []
        return self._text(records) if records else ""

    def _text(self, records: list[tuple[float, str, str, dict]]) -> str:
        as_json = self.log.json_lines
        stamps: dict[int, str] = {}  # per millisecond: the lines of a batch share a few
        lines = []
        for t, event, level, fields in records:
            ms = int(t * 1000)
            ts = stamps.get(ms)
            if ts is None:
                ts = stamps[ms] = stamp(ms)
            if as_json:
                lines.append(json_line(ts, event, level, fields))
                continue
            line = plain_line(ts, event, level, fields)
            # a value's newline escaped as for_terminal(keep="") does: the one pass over
            # the whole text below keeps the lines' own newlines only
            lines.append(line.replace("\n", "\\x0a") if "\n" in line else line)
        text = "\n".join(lines) + "\n"
        if not as_json and (_ASCII_ACTS_BUT_NEWLINE if text.isascii() else _ACTS_BUT_NEWLINE).search(text):
            text = for_terminal(text, keep="\n")
        return text


def stamp(ms: int | None = None) -> str:
    """A line's `ts` (the one home of its form): now, or the instant `ms` in
    milliseconds since the epoch."""
    if ms is None:
        ms = int(time.time() * 1000)
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def one_line(text: object, width: int | None = None) -> str | None:
    """Any text (an error's included: libpq messages carry a second, indented line) on
    one line, cut to `width` with an ellipsis when given. None stays None; an error
    with an empty message reads as its type."""
    if text is None:
        return None
    flat = " ".join(str(text).split()) or (type(text).__name__ if isinstance(text, BaseException) else "")
    return flat if width is None or len(flat) <= width else flat[: max(width - 1, 0)] + "…"


def startup_error(log: EventLog, prog: str, as_json: bool, e: BaseException) -> None:
    """One line: a JSON event with --json, plain text on stderr otherwise."""
    if as_json:
        log("config error", level="error", reason=one_line(e))
    else:
        print(f"{prog}: {one_line(e)}", file=sys.stderr)


class _LibraryLines(logging.Handler):
    """A library's log record (psycopg's `error ignored terminating <Pipeline>` after a
    lost connection, a Python warning) as one line of an EventLog."""

    def __init__(self, log: EventLog):
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = "error" if record.levelno >= logging.ERROR else "warning"
            self.log("library warning", level=level, logger=record.name, reason=one_line(record.getMessage()))
        except Exception:  # noqa: BLE001 - a log line must never stop a daemon
            pass


def route_library_logs(log: EventLog) -> None:
    """The libraries' warnings (the logging module's, Python's warnings) go to `log`, one
    line each: without this Python writes them to stderr as bare text, which breaks
    --json's one-object-a-line."""
    root = logging.getLogger()
    root.handlers[:] = [_LibraryLines(log)]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
