"""The event log: one line per decision, flushed at once, or once for a batch of lines."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from uuid import UUID

from helpers import FlushCountingStream
from scrinalia_workers.logs import EventLog


def test_each_line_is_flushed_at_once_outside_a_batch():
    out = FlushCountingStream()
    log = EventLog(stream=out)
    log("armed", worker="a")
    log("armed", worker="b")
    assert out.flushes == 2 and out.getvalue().count("\n") == 2


def test_a_batch_of_lines_is_flushed_once_at_its_end():
    out = FlushCountingStream()
    log = EventLog(json_lines=True, stream=out)
    with log.batch():
        for i in range(1000):
            log("enqueued", worker=f"w{i}")
        with log.batch():  # nested: still one flush, at the outer end
            log("skipped", worker="x")
        assert out.flushes == 0
    assert out.flushes == 1 and out.getvalue().count("\n") == 1001
    log("armed", worker="y")
    assert out.flushes == 2


def test_a_closed_stream_does_not_stop_a_batch():
    out = io.StringIO()
    log = EventLog(stream=out)
    with log.batch():
        log("armed", worker="a")
        out.close()
        log("armed", worker="b")


def test_a_json_line_writes_what_json_cannot_hold_as_text():
    out = io.StringIO()
    EventLog(json_lines=True, stream=out)(
        "claimed", run_id=7, at=datetime(2026, 1, 2, tzinfo=UTC), token=UUID(int=1), share=Decimal("0.5"), note="é\n"
    )
    line = out.getvalue()
    assert line.count("\n") == 1  # one line, whatever the fields hold
    got = json.loads(line)
    assert (got["run_id"], got["at"], got["token"], got["share"], got["note"]) == (
        7,
        "2026-01-02 00:00:00+00:00",
        "00000000-0000-0000-0000-000000000001",
        "0.5",
        "é\n",
    )
