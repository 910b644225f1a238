"""The cron next occurrences a pass computes, shared by its chunks and its log lines."""

from __future__ import annotations

import bisect
import threading
from datetime import UTC, datetime, timedelta

from scrinalia_workers import cron

# periods fall on minutes: only a period due over a minute ago can hide another
_CAN_HIDE = timedelta(minutes=1)


class Occurrences:
    """Next occurrences per (cron, zone), kept as windows: the first occurrence after an
    instant is also the first after every later instant before it. So the chunks of a
    pass share them (each chunk's now() is a little later), and so does its log: whether
    an enqueued period hid others is one evaluation per (cron, zone) and missed window,
    not one per run. An error is not kept: it is rare, and the schedule is set aside.

    Instants are kept and compared in UTC: the session's zone is the server's, and two
    datetimes of one zone compare and subtract by their wall clocks, so in a fall-back
    fold a later instant can read as an earlier one."""

    def __init__(self) -> None:
        # per (cron, zone): its windows' starts, in order, and the first occurrence
        # after each (two lists: a bisect of the starts needs no key function)
        self._windows: dict[tuple[str, str], tuple[list[datetime], list[datetime]]] = {}
        # the pass computes a chunk's next occurrences while a thread logs the last one's
        self._lock = threading.Lock()

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

    def _after(self, pair: tuple[str, str], t: datetime) -> datetime:
        """cron.next_occurrence(cron, zone, t) for a UTC `t`, raising as it does; under
        the lock."""
        nxt = self._known(pair, t)
        if nxt is None:
            nxt = cron.next_occurrence(*pair, t)
            self._keep(pair, t, nxt)
        return nxt

    def after_each(
        self, pairs: list[tuple[str, str]], t: datetime, since: list[datetime | None] | None = None
    ) -> list[datetime | Exception]:
        """cron.try_next_occurrences(pairs, t): each distinct pair once, an error in its
        pair's place; what an earlier chunk computed is reused. `since`, beside `pairs`:
        the instants the due schedules waited for (each at or before `t`). A pair's first
        occurrence after the earliest of them is computed first: when it is after `t`, it
        is also the first after `t`, and the log's catch-up check of the pair's runs finds
        it kept (no period missed: one evaluation, not two)."""
        t = t.astimezone(UTC)
        out: dict[tuple[str, str], datetime | Exception] = {}
        todo = []
        with self._lock:
            for p in set(pairs):
                known = self._known(p, t)
                if known is None:
                    todo.append(p)
                else:
                    out[p] = known
            if since is not None and todo:
                # (the earliest by the wall clock: in a fold maybe not the earliest
                # instant, which costs an evaluation, never an answer)
                earliest: dict[tuple[str, str], datetime] = {}
                for p, s in zip(pairs, since):
                    if s is not None and (p not in earliest or s < earliest[p]):
                        earliest[p] = s
                for p in todo:
                    s = earliest.get(p)
                    if s is None:
                        continue
                    s = s.astimezone(UTC)
                    if t - s < _CAN_HIDE or self._known(p, s) is not None:
                        continue
                    (n,) = cron.try_next_occurrences([p], s)
                    if not isinstance(n, Exception):
                        self._keep(p, s, n)
                        if n > t:
                            out[p] = n
                todo = [p for p in todo if p not in out]
            for p, n in zip(todo, cron.try_next_occurrences(todo, t)):
                out[p] = n
                if not isinstance(n, Exception):
                    self._keep(p, t, n)
        return [out[p] for p in pairs]

    def missed(self, pair: tuple[str, str], sched_for: datetime, db_now: datetime) -> bool:
        """Whether an occurrence falls in (sched_for, db_now]: the run is a catch-up."""
        s, now = sched_for.astimezone(UTC), db_now.astimezone(UTC)
        if now - s < _CAN_HIDE:
            return False
        with self._lock:
            return self._after(pair, s) <= now
