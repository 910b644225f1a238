"""What reaches the operator's terminal: text read from the database or a file, never
anything the terminal would act on.

main() puts a TerminalGuard in front of stdout and stderr, so that every line any command
prints goes through text.for_terminal: an escape sequence, a carriage return, a C1
control or a bidi override written through the SQL API shows as a visible escape. The
one control sequence of our own (the status screen's clear) goes through write_control.
"""

from __future__ import annotations

import io
from typing import TextIO

from scrinalia_workers.text import for_terminal


class TerminalGuard(io.TextIOBase):
    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, s: str) -> int:
        self.stream.write(for_terminal(s))
        return len(s)

    def write_control(self, sequence: str) -> None:
        """A control sequence of the CLI's own, written as is."""
        self.stream.write(sequence)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding


def write_control(out: TextIO, sequence: str) -> None:
    """Writes a control sequence of our own past a TerminalGuard (or to any other stream)."""
    guard = getattr(out, "write_control", None)
    if guard is not None:
        guard(sequence)
    else:
        out.write(sequence)
