"""A library's own warning (psycopg's `error ignored terminating <psycopg.Pipeline [BAD]>`
after a lost connection, a Python warning) is a line of the daemon's log: under --json
a JSON object, never bare text on stderr."""

from __future__ import annotations

import io
import json
import logging
import warnings

from scrinalia_workers.logs import EventLog, route_library_logs


def test_library_warnings_are_json_lines():
    out = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            route_library_logs(EventLog(json_lines=True, stream=out))
            logging.getLogger("psycopg").warning(
                "error ignored terminating %r: %s", "<psycopg.Pipeline [BAD] at 0x7f>", "the connection is lost"
            )
            warnings.warn("a library's warning\nover two lines", RuntimeWarning, stacklevel=1)
            logging.captureWarnings(False)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["event"], e["level"], e["logger"]) for e in events] == [
        ("library warning", "warning", "psycopg"),
        ("library warning", "warning", "py.warnings"),
    ]
    assert events[0]["reason"] == "error ignored terminating '<psycopg.Pipeline [BAD] at 0x7f>': the connection is lost"
    assert "a library's warning over two lines" in events[1]["reason"]
