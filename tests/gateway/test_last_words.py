"""A daemon's second signal: one last line, then the exit, even when the code the signal
interrupted holds the log's lock (the runner-level case with a full log pipe is in
tests/runner/test_runner_signals.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# the exit is bounded by LAST_WORDS_WITHIN; this only keeps a hang from hanging the suite
EXIT_WITHIN = 30

_INTERRUPTED_INSIDE_A_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    from scrinalia_workers.exits import exit_at_once
    from scrinalia_workers.logs import EventLog

    log = EventLog(json_lines=True)
    signal.signal(signal.SIGINT, lambda s, f: exit_at_once(130, log, "exiting at once", reason="test"))
    log("before")
    with log._writing:  # as inside a log write when the signal comes
        sys.stderr.write('{"half": ')
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()
    """
)


def test_the_last_line_is_written_while_the_interrupted_code_holds_the_log_lock():
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_INSIDE_A_WRITE], timeout=EXIT_WITHIN, capture_output=True, text=True
    )
    assert done.returncode == 130, done.stderr
    lines = done.stderr.splitlines()
    assert json.loads(lines[0])["event"] == "before"
    # the half line it interrupted stays half; the last line is whole, on a line of its own
    assert lines[1] == '{"half": '
    last = json.loads(lines[2])
    assert (last["event"], last["level"], last["reason"]) == ("exiting at once", "warning", "test")
    assert len(lines) == 3
