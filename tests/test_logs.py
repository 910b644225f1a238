"""The event log: one line per decision, flushed at once, or once for a batch of lines."""

from __future__ import annotations

import io

from scrinalia_workers.logs import EventLog


class Counted(io.StringIO):
    def __init__(self):
        super().__init__()
        self.flushes = 0

    def flush(self):
        self.flushes += 1
        super().flush()


def test_each_line_is_flushed_at_once_outside_a_batch():
    out = Counted()
    log = EventLog(stream=out)
    log("armed", worker="a")
    log("armed", worker="b")
    assert out.flushes == 2 and out.getvalue().count("\n") == 2


def test_a_batch_of_lines_is_flushed_once_at_its_end():
    out = Counted()
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
