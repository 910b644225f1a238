"""A log line defined once, written two ways: EventLog's general path, or a fast path
for the lines a daemon writes per run or per decision.

With --json, the general path costs a timestamp, a dict and the JSON encoder a line.
A LineSpec names its event, level and fields (each an int or a str) once, and from
that one definition formats a batch of lines as EventLog would (json_line's order
and encoding: ensure_ascii, ", " and ": "), one timestamp per batch, one write. Plain
text, a log of another type (the tests' recorders) or a level below the log's
threshold take the general path, from the same definition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from scrinalia_workers.logs import LEVELS, EventLog, stamp


def _int(value: Any) -> str:
    return str(int(value))


def _str(value: str | None) -> str:
    return "null" if value is None else _quote(value)


_ENCODERS = {int: _int, str: _str}


def _literal(text: str) -> str:
    """A quoted name, safe inside a %-template."""
    return _quote(text).replace("%", "%%")


class LineSpec:
    """One kind of line: its event, its level and its fields, in order, each an int or a str."""

    __slots__ = ("event", "level", "names", "kinds", "_template", "_encoders")

    def __init__(self, event: str, level: str, fields: Sequence[tuple[str, type]]):
        self.event = event
        self.level = level
        self.names = tuple(name for name, _ in fields)
        self.kinds = tuple(kind for _, kind in fields)
        self._encoders = tuple(_ENCODERS[kind] for _, kind in fields)
        head = f'{{"ts": %s, "event": {_literal(event)}, "level": {_literal(level)}'
        body = "".join(f", {_literal(name)}: %s" for name in self.names)
        self._template = head + body + "}\n"

    def fast(self, log: EventLog) -> bool:
        """Whether this log takes the fast path (JSON lines of EventLog itself, level shown)."""
        return type(log) is EventLog and log.json_lines and LEVELS[self.level] >= log.threshold

    def json(self, ts: str, values: Sequence[Any]) -> str:
        """The line as json_line() writes it, `ts` already quoted."""
        return self._template % (ts, *(enc(v) for enc, v in zip(self._encoders, values)))

    def write(self, log: EventLog, rows: Iterable[Sequence[Any]]) -> None:
        """One line per row of values (in the fields' order), written together."""
        if self.fast(log):
            ts = _quote(stamp())
            log.write_text("".join(self.json(ts, values) for values in rows))
            return
        with log.batch():
            for values in rows:
                log(self.event, level=self.level, **dict(zip(self.names, values)))
