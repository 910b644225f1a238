"""Leaving a daemon at once from a signal handler, with a last line said.

The line may not hold the exit: the code the signal interrupted may hold the log's
lock (EventLog.last_words does not wait for it), and a log pipe nobody reads blocks
the write itself, so an alarm leaves without the line after LAST_WORDS_WITHIN.
"""

from __future__ import annotations

import os
import signal
from typing import Any, NoReturn

LAST_WORDS_WITHIN = 1.0  # seconds the last line may take before the exit goes without it

# The signals the daemons handle. Python runs their handlers in the main thread only, and
# a signal the kernel hands to another thread does not interrupt the main thread's
# blocked system call (a write to a log pipe nobody reads): the helper threads block them.
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)


def leave_signals_to_the_main_thread() -> None:
    """Called first in a helper thread: the handled signals go to the main thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)


def exit_at_once(code: int, log: Any, event: str, **fields: Any) -> NoReturn:
    """os._exit(code) after one warning line; called from a signal handler."""
    try:
        signal.signal(signal.SIGALRM, lambda *_: os._exit(code))
        signal.setitimer(signal.ITIMER_REAL, LAST_WORDS_WITHIN)
        say = getattr(log, "last_words", None) or log  # a test's recorder is a plain callable
        say(event, level="warning", **fields)
    finally:
        os._exit(code)
