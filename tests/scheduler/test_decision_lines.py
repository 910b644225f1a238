"""decision_text() writes a chunk's decision lines itself: byte for byte what
log_decision() logs through Lines, for every kind of decision, hostile text included,
in plain text and in JSON. Whether a run is a catch-up is the tick's catch_up column,
written as it came."""

from __future__ import annotations

import io
import json
import sys
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from scrinalia_workers.logs import EventLog, Lines
from scrinalia_workers.scheduler import decision_lines
from scrinalia_workers.text import _ACTING

AT = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
COLUMNS = ["worker_name", "decision", "run_id", "scheduled_for", "next_run_at", "reason", "catch_up"]
ROWS = [
    ("armed", "ARMED", None, None, AT + HOUR, None, None),
    # the tick said periods were missed: a catch-up (whatever the instants, which the
    # shim no longer reads for it)
    ("late", "ENQUEUED", 7, AT - 3 * HOUR, AT + HOUR, None, True),
    ("on-time", "ENQUEUED", 8, AT, AT + HOUR, None, False),
    ("said-late", "ENQUEUED", 11, AT, AT + HOUR, None, True),
    ("busy", "SKIPPED", None, AT, AT + HOUR, "run #12 is active", None),
    ("no-reason", "SKIPPED", None, AT, AT + HOUR, None, None),
    ("w\x1b[2J\r\u202e\x9bcaf\u00e9", "ENQUEUED", 9, AT, AT + HOUR, None, False),
    ("w\n2026-12-04T00:00:00.000+00:00 INFO enqueued worker=forged", "SKIPPED", None, AT, AT + HOUR, "x", None),
    ("reason-nl", "SKIPPED", None, AT, AT + HOUR, "a\nforged \x1b[31m line \u2028", None),
    ("refused", "REFUSED", None, AT, AT, 'the tick refused it: "0 * * * *" does not fire then', None),
    ("offset", "ENQUEUED", 10, AT.astimezone(timezone(HOUR)), (AT + HOUR).astimezone(timezone(HOUR)), None, False),
]
CRONS = {r[0]: ("0 * * * *", "UTC") for r in ROWS}


def _through_lines(log: EventLog) -> str:
    lines = Lines(log)
    for r in ROWS:
        decision_lines.log_decision(lines, dict(zip(COLUMNS, r)), CRONS[r[0]])
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
    got = decision_lines.decision_text(log, COLUMNS, [list(r) for r in ROWS], CRONS)
    assert got == expected
    lines = got.splitlines()
    if level == "warning":
        assert len(lines) == 1 and "tick refused" in lines[0]
        return
    assert len(lines) == len(ROWS) + 2  # and the catch-up lines
    if as_json:
        events = [json.loads(x) for x in lines]
        assert [e["worker"] for e in events if e["event"] == "catch-up"] == ["late", "said-late"]
        assert {e["worker"]: e["catch_up"] for e in events if e["event"] == "enqueued"}["on-time"] is False
        assert general == ["refused"]  # the unusual row only went the general way
    else:
        assert not any(c in got for c in "\x1b\r\u202e\x9b\u2028")
        assert "\nforged" not in got and "\n2026-12-04T00:00:00.000+00:00 INFO enqueued worker=forged" not in got
        # a value a terminal could act on (a newline included), and the refusal
        assert general == [ROWS[6][0], ROWS[7][0], "reason-nl", "refused"]


def test_every_character_a_terminal_could_act_on_is_not_printable():
    # what lets decision_text() leave the escaping to Lines, for the values it sends there
    acting = [c for c in map(chr, range(sys.maxunicode + 1)) if _ACTING.fullmatch(c)]
    assert len(acting) > 100
    assert [hex(ord(c)) for c in acting if c.isprintable()] == []


def test_no_decision_no_text():
    assert decision_lines.decision_text(EventLog(stream=io.StringIO()), [], [], {}) == ""
