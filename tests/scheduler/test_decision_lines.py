"""decision_text() writes a chunk's decision lines itself: byte for byte what
log_decision() logs through Lines, for every kind of decision, hostile text included,
in plain text and in JSON."""

from __future__ import annotations

import io
import json
import sys
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from scrinalia_workers.logs import EventLog, Lines
from scrinalia_workers.scheduler import decision_lines
from scrinalia_workers.scheduler.occurrences import Occurrences
from scrinalia_workers.text import _ACTING

AT = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
COLUMNS = ["worker_name", "decision", "run_id", "scheduled_for", "next_run_at", "reason"]
ROWS = [
    ("armed", "ARMED", None, None, AT + HOUR, None),
    ("late", "ENQUEUED", 7, AT - 3 * HOUR, AT + HOUR, None),  # periods missed: a catch-up
    ("on-time", "ENQUEUED", 8, AT, AT + HOUR, None),
    ("busy", "SKIPPED", None, AT, AT + HOUR, "run #12 is active"),
    ("no-reason", "SKIPPED", None, AT, AT + HOUR, None),
    ("w\x1b[2J\r\u202e\x9bcaf\u00e9", "ENQUEUED", 9, AT, AT + HOUR, None),
    ("w\n2026-12-04T00:00:00.000+00:00 INFO enqueued worker=forged", "SKIPPED", None, AT, AT + HOUR, "x"),
    ("reason-nl", "SKIPPED", None, AT, AT + HOUR, "a\nforged \x1b[31m line \u2028"),
    ("refused", "REFUSED", None, AT, AT, 'the tick refused it: "0 * * * *" does not fire then'),
    ("offset", "ENQUEUED", 10, AT.astimezone(timezone(HOUR)), (AT + HOUR).astimezone(timezone(HOUR)), None),
]
CRONS = {r[0]: ("0 * * * *", "UTC") for r in ROWS}
DB_NOW = AT + timedelta(seconds=30)


def _through_lines(log: EventLog) -> str:
    lines = Lines(log)
    for r in ROWS:
        decision_lines.log_decision(lines, dict(zip(COLUMNS, r)), CRONS[r[0]], DB_NOW, Occurrences())
    return lines.text()


@pytest.mark.parametrize("level", ["info", "warning"])
@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_the_lines_are_those_log_decision_writes_through_lines(monkeypatch, as_json, level):
    monkeypatch.setattr(time, "time", lambda: 1764885600.123)  # one instant for both
    log = EventLog(json_lines=as_json, level=level, stream=io.StringIO())
    expected = _through_lines(log)
    general = []
    real = decision_lines.log_decision
    monkeypatch.setattr(decision_lines, "log_decision", lambda *a: general.append(a[1]["worker_name"]) or real(*a))
    got = decision_lines.decision_text(log, COLUMNS, [list(r) for r in ROWS], CRONS, DB_NOW, Occurrences())
    assert got == expected
    lines = got.splitlines()
    if level == "warning":
        assert len(lines) == 1 and "tick refused" in lines[0]
        return
    assert len(lines) == len(ROWS) + 1  # and the catch-up line
    if as_json:
        assert [json.loads(x)["event"] for x in lines].count("catch-up") == 1
        assert general == ["refused"]  # the unusual row only went the general way
    else:
        assert not any(c in got for c in "\x1b\r\u202e\x9b\u2028")
        assert "\nforged" not in got and "\n2026-12-04T00:00:00.000+00:00 INFO enqueued worker=forged" not in got
        # a value a terminal could act on (a newline included), and the refusal
        assert general == [ROWS[5][0], ROWS[6][0], "reason-nl", "refused"]


def test_every_character_a_terminal_could_act_on_is_not_printable():
    # what lets decision_text() leave the escaping to Lines, for the values it sends there
    acting = [c for c in map(chr, range(sys.maxunicode + 1)) if _ACTING.fullmatch(c)]
    assert len(acting) > 100
    assert [hex(ord(c)) for c in acting if c.isprintable()] == []


def test_no_decision_no_text():
    assert decision_lines.decision_text(EventLog(stream=io.StringIO()), [], [], {}, DB_NOW, Occurrences()) == ""
