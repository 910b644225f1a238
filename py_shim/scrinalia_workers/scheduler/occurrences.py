"""The cron next occurrences a pass computes, shared by its chunks."""

from __future__ import annotations

import bisect
from datetime import UTC, datetime

from scrinalia_workers import cron


class Occurrences:
    """Next occurrences per (cron, zone), kept as windows: the first occurrence after an
    instant is also the first after every later instant before it. So the chunks of a
    pass share them (each chunk's now() is a little later). An error is not kept: it is
    rare, and the schedule is set aside. (Whether a run is a catch-up is the tick's
    answer, not computed here.)

    Instants are kept and compared in UTC (the work session reads them so; a caller may
    pass any zone): two datetimes of one zone compare and subtract by their wall
    clocks, so in a fall-back fold a later instant can read as an earlier one."""

    def __init__(self) -> None:
        # per (cron, zone): its windows' starts, in order, and the first occurrence
        # after each (two lists: a bisect of the starts needs no key function)
        self._windows: dict[tuple[str, str], tuple[list[datetime], list[datetime]]] = {}

    def _known(self, pair: tuple[str, str], t: datetime) -> datetime | None:
        windows = self._windows.get(pair)
        if windows is None:
            return None
        starts, nexts = windows
        i = bisect.bisect_right(starts, t) - 1
        return nexts[i] if i >= 0 and t < nexts[i] else None

    def _keep(self, pair: tuple[str, str], t: datetime, nxt: datetime) -> None:
        starts, nexts = self._windows.setdefault(pair, ([], []))
        i = bisect.bisect_right(starts, t)
        starts.insert(i, t)
        nexts.insert(i, nxt)

    def after_each(self, pairs: list[tuple[str, str]], t: datetime) -> list[datetime | Exception]:
        """cron.try_next_occurrences(pairs, t): each distinct pair once, an error in its
        pair's place; what an earlier chunk computed is reused."""
        t = t.astimezone(UTC)
        out: dict[tuple[str, str], datetime | Exception] = {}
        todo = []
        for p in set(pairs):
            known = self._known(p, t)
            if known is None:
                todo.append(p)
            else:
                out[p] = known
        for p, n in zip(todo, cron.try_next_occurrences(todo, t)):
            out[p] = n
            if not isinstance(n, Exception):
                self._keep(p, t, n)
        return [out[p] for p in pairs]
