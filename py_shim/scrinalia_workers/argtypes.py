"""Argument types shared by the CLI and both daemons: a bad value is one line from the
parser (exit 2), never a traceback, and the line names the range."""

from __future__ import annotations

import argparse
import math

from scrinalia_workers.text import printable


class DaemonParser(argparse.ArgumentParser):
    """The daemons' parser: a bad argument is one line and exit 2, no usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {' '.join(message.split())}\n")


def count(lo: int, hi: int, what: str = "a whole number"):
    """A whole number in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            n = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{printable(text[:40])!r} is not {what}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{text} is out of range {lo}..{hi}")
        return n

    parse.__name__ = what  # argparse names the type in its message
    return parse


def seconds(lo: float, hi: float, *, above: bool = False):
    """A finite number of seconds in [lo, hi] (in (lo, hi] when `above`)."""
    span = (f"more than {lo:g} and at most {hi:g}" if above else f"between {lo:g} and {hi:g}") + " seconds"

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{printable(text[:40])!r} is not a number of seconds: {span}") from None
        if not math.isfinite(x) or x > hi or (x <= lo if above else x < lo):
            raise argparse.ArgumentTypeError(f"{printable(text[:40])} is out of range: {span}")
        return x

    parse.__name__ = "seconds"
    return parse


def add_wait_for_database(p: argparse.ArgumentParser, most: float) -> None:
    """The daemons' --wait-for-database: how long start-up waits for a database that is
    not reachable yet (None: as long as it takes; 0: exit 2 at once)."""
    p.add_argument(
        "--wait-for-database",
        type=seconds(0, most),
        default=None,
        metavar="SECONDS",
        help="at start-up, how long to wait for a database not reachable yet (default: as long as it takes; 0: exit 2)",
    )
