"""One line per decision: plain `ts event key=value ...` or, with --json, a JSON object."""

from __future__ import annotations

import contextlib
import json
import sys
from datetime import UTC, datetime

from scrinalia_workers.text import for_terminal

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
# json.dumps(default=...) builds an encoder per call; the daemons write a line per run
_ENCODER = json.JSONEncoder(default=str)


class EventLog:
    def __init__(self, json_lines: bool = False, level: str = "info", stream=None):
        self.json_lines = json_lines
        self.threshold = LEVELS.get(level.lower(), 20)
        self.stream = stream or sys.stderr
        self._batched = 0

    def __call__(self, event: str, level: str = "info", **fields) -> None:
        if LEVELS.get(level, 20) < self.threshold:
            return
        ts = datetime.now(UTC).isoformat(timespec="milliseconds")
        if self.json_lines:
            line = _ENCODER.encode({"ts": ts, "event": event, "level": level, **fields})
        else:
            parts = " ".join(f"{k}={v}" for k, v in fields.items())
            # a value read from the database may hold anything: nothing in it acts on a terminal,
            # and no newline in it forges a line of its own
            line = for_terminal(f"{ts} {level.upper()} {event}" + (f" {parts}" if parts else ""), keep="")
        try:
            self.stream.write(line + "\n")
            if not self._batched:
                self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe must not stop the daemon

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
