"""One pass of the holder, on the work session: reap expired leases, create retries,
repair stored instants no cron or policy produces (at the first pass, before the due
schedules; then about once a minute, after them: see Repair), then the due schedules
in chunks, and a log line per decision.

Each chunk of at most settings.tick_chunk due schedules is one transaction: check the lock,
due_schedules(tick_chunk + 1) + the cron next occurrences + tick() of the first
tick_chunk, commit (the one more says whether another chunk is due: a spike of whole
chunks costs no last, empty one). Runs become
visible chunk by chunk (a spike of 10,000 due at one instant does not wait for the
last one), the heartbeat is written between chunks, and a chunk that fails rolls back
alone. A schedule whose next occurrence cannot be computed here is set aside
(scrinalia.set_schedules_aside) and retried later; the others fire regardless.

Then the chores, after the due schedules: the retention's batches when a sweep is due
(prune_expired) and the new alerts sent on scrinalia_alerts (announce_alerts), each
paced by instants the database keeps.
"""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.errors import INVALID_TICK_CALL, NOT_LOCK_HOLDER, NOT_THE_SCHEDULER, LockLost
from scrinalia_workers.exits import leave_signals_to_the_main_thread
from scrinalia_workers.gateway.backoff import is_transient
from scrinalia_workers.gateway.connection import now_instants_cursor
from scrinalia_workers.gateway.statements import scheduler as sql
from scrinalia_workers.logs import EventLog, Lines, one_line
from scrinalia_workers.scheduler.decision_lines import decision_text
from scrinalia_workers.scheduler.occurrences import Occurrences
from scrinalia_workers.scheduler.settings import DEFAULTS, SchedulerSettings

# What the reaper ended, by its fingerprint: a lease that ran out, or a run past its
# worker's maximum run time (a hung handler, most often: worth its own line).
REAPED_EVENTS = {"lease-expired": ("lease reaped", "info"), "max-run-time": ("run timed out", "warning")}

Row = dict[str, Any]


class Repair(enum.Enum):
    """When a pass looks for stored instants no cron or policy produces. BEFORE the due
    schedules at a scheduler's first pass: what a clock that jumped left behind is
    repaired before anything is decided on it. AFTER them at the pass each
    repair_every brings: it reads every armed schedule, and a schedule due at that
    pass does not wait for it."""

    BEFORE = "before"
    AFTER = "after"


def check_lock_in_transaction(cur: psycopg.Cursor[Row], lock_pid: int | None) -> None:
    """The first statement of a tick transaction: the session `lock_pid` must hold the
    lock, else LockLost and the transaction rolls back."""
    try:
        cur.execute(sql.CHECK_LOCK, (lock_pid,))
    except psycopg.Error as e:
        if e.sqlstate == NOT_LOCK_HOLDER:
            raise LockLost(e.diag.message_primary) from None
        raise


class Pass:
    """One pass over the work session `conn` for the scheduler `name`, whose lock
    session is `lock_pid`; `check_lock` is the heartbeat run between chunks."""

    def __init__(
        self,
        conn: psycopg.Connection,
        *,
        name: str,
        lock_pid: int | None,
        log: EventLog,
        check_lock: Callable[[], None],
        repair: Repair | None = Repair.BEFORE,
        settings: SchedulerSettings = DEFAULTS,
        computing: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ):
        """`repair`: whether this pass looks for bad stored instants, and when (Repair;
        the scheduler says).
        `computing`: around this process's work inside a transaction of `conn` (the cron
        occurrences), which keeps the session from the server's idle limit meanwhile."""
        self.computing = computing
        self.conn = conn
        self.repair = repair
        self.settings = settings
        self.name = name
        self.lock_pid = lock_pid
        self.log = log
        self.check_lock = check_lock
        self.occurrences = Occurrences()  # shared by the chunks of this pass
        # a chunk's lines are formatted and written by one thread, in order, while the
        # next chunk's tick runs in the database; run() returns once every line is written
        self._lines: ThreadPoolExecutor | None = None
        self._queued: list[Future[None]] = []
        self._held: Callable[[], None] | None = None  # a chunk's lines, not yet handed over
        self._lines_error: BaseException | None = None

    def run(self) -> bool:
        """Reap, retries, then the due schedules. True when it decided anything."""
        try:
            progressed = self._run()
        finally:
            self._hand_over_lines()
            self._wait_lines(0)
            if self._lines is not None:
                self._lines.shutdown()
        if self._lines_error is not None:
            # the pass went on (the other chunks' lines are written), and says so now
            raise self._lines_error
        return progressed

    def _queue_lines(
        self,
        crons: dict[str, tuple[str, str]],
        aside: list[Row],
        columns: list[str],
        decided: list[tuple],
    ) -> None:
        """The lines of a committed chunk: a small one's written at once (after those
        before it); a large one's held for the thread (at most one more waiting), which
        gets them when the next chunk's tick is sent (_hand_over_lines) or the chunks
        are done. Formatting them while this thread reads the next chunk's due rows and
        computes its instants, both in Python, would slow both down; while the database
        runs the tick, this thread only waits."""
        self._hand_over_lines()  # (a chunk with no tick sent: the lines before it first)
        if len(decided) < self.settings.thread_lines:
            self._wait_lines(0)
            self._log_chunk(crons, aside, columns, decided)
            return
        self._wait_lines(1)
        self._held = functools.partial(self._log_chunk, crons, aside, columns, decided)

    def _hand_over_lines(self) -> None:
        """The held lines, if any, to the thread."""
        held, self._held = self._held, None
        if held is None:
            return
        if self._lines is None:
            self._lines = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="tick-lines", initializer=leave_signals_to_the_main_thread
            )
        self._queued.append(self._lines.submit(held))

    def _wait_lines(self, left: int) -> None:
        """Until at most `left` chunks' lines are waiting; the first error is kept."""
        while len(self._queued) > left:
            error = self._queued.pop(0).exception()
            if error is not None and self._lines_error is None:
                self._lines_error = error

    def _run(self) -> bool:
        # binary results, and the arrays below sent binary (%b): psycopg writes a large
        # array of timestamps far faster in binary than as text
        cur = self.conn.cursor(row_factory=dict_row, binary=True)
        progressed = False
        for r in cur.execute(sql.REAP_EXPIRED_LEASES):
            progressed = True
            self.log(
                *REAPED_EVENTS.get(r["error_fingerprint"], ("lease reaped", "info")),
                run_id=r["run_id"],
                worker=r["worker_name"],
                runner=r["lease_owner"],
                reason=r["error"],
            )
        for r in cur.execute(sql.CREATE_RETRIES):
            progressed = True
            self.log(
                "retry created",
                run_id=r["run_id"],
                retry_of=r["retry_of"],
                worker=r["worker_name"],
                attempt=r["attempt"],
                not_before=r["not_before"].isoformat(),
            )
        if self.repair is Repair.BEFORE:
            progressed = self._repair(cur) or progressed
        for n in range(self.settings.max_chunks):
            if n:
                self.check_lock()  # the heartbeat, and a lost lock stops the pass between chunks
            decided, full = self.chunk(cur)
            progressed = progressed or decided
            if not (full and decided):
                break
        self._hand_over_lines()  # (written while the chores below run)
        if self.repair is Repair.AFTER:
            progressed = self._repair(cur) or progressed
        # after the due schedules, each in short transactions of its own: never before a tick
        self.chore("retention", lambda: prune_expired(cur, self.conn, self.lock_pid, self.log, self.check_lock))
        self.chore("alerts", lambda: announce_alerts(cur, self.conn, self.lock_pid))
        return progressed

    def _repair(self, cur: psycopg.Cursor[Row]) -> bool:
        return repair_instants(cur, self.conn, self.name, self.lock_pid, self.log, self.occurrences, self.computing)

    def chore(self, name: str, run: Callable[[], None]) -> None:
        """A chore that fails is one error line, and the pass is done all the same: the
        daemon's backoff after a failed pass must not slow the ticks down for it. A lost
        connection or lock, or a refusal as not the scheduler, still ends the pass."""
        try:
            run()
        except psycopg.Error as e:
            if is_transient(e) or self.conn.closed or e.sqlstate == NOT_THE_SCHEDULER:
                raise
            reason = one_line(e.diag.message_primary or str(e))
            self.log("chore failed", level="error", chore=name, sqlstate=e.sqlstate, reason=reason)

    def chunk(self, cur: psycopg.Cursor[Row]) -> tuple[bool, bool]:
        """One tick transaction over at most TICK_CHUNK due schedules. Returns (decided
        anything, the chunk was full: more may be due)."""
        # the due rows and the decisions as tuples, their columns found by name (a dict
        # per row costs more than the rest of a decision's Python); the thread that logs
        # the decisions makes them rows
        plain = now_instants_cursor(self.conn)  # (instants in range: the statements say why)
        with self.conn.transaction():
            check_lock_in_transaction(cur, self.lock_pid)
            chunk = self.settings.tick_chunk
            due = plain.execute(sql.DUE_SCHEDULES, (chunk + 1,)).fetchall()
            if not due:
                return False, False
            full = len(due) > chunk
            del due[chunk:]  # (locked until the commit, then the next chunk's first)
            w, c, z, t = _positions(plain, "worker_name", "cron", "timezone", "db_now")
            db_now = due[0][t]
            with self.computing():
                nexts = self.occurrences.after_each([(d[c], d[z]) for d in due], db_now)
            names = [d[w] for d in due]
            aside: list[Row] = []
            if any(isinstance(n, Exception) for n in nexts):
                bad = [(name, e) for name, e in zip(names, nexts) if isinstance(e, Exception)]
                aside = cur.execute(
                    sql.SET_SCHEDULES_ASIDE,
                    (
                        [name for name, _ in bad],
                        [f"cannot compute the next occurrence here: {one_line(e)}" for _, e in bad],
                    ),
                ).fetchall()
                names, nexts = (
                    [name for name, nxt in zip(names, nexts) if not isinstance(nxt, Exception)],
                    [nxt for nxt in nexts if not isinstance(nxt, Exception)],
                )
            decided: list[tuple] = []
            columns: list[str] = []
            if names:
                self._hand_over_lines()  # (formatted while the database runs the tick)
                decided = plain.execute(sql.TICK, (names, nexts, self.name)).fetchall()
                columns = [c.name for c in plain.description or ()]
        crons = {d[w]: (d[c], d[z]) for d in due}
        self._queue_lines(crons, aside, columns, decided)
        return bool(decided or aside), full

    def _log_chunk(
        self,
        crons: dict[str, tuple[str, str]],
        aside: list[Row],
        columns: list[str],
        decided: list[tuple],
    ) -> None:
        """The lines of one chunk committed: its schedules set aside, its decisions."""
        lines = Lines(self.log)
        for a in aside:
            lines(
                "schedule set aside",
                level="error",
                worker=a["worker_name"],
                reason=a["arm_error"],
                since=a["arm_error_since"],
                retry_at=a["arm_retry_at"],
            )
        text = lines.text() + decision_text(self.log, columns, decided, crons)
        if text:
            self.log.write_text(text, flush=True)


def _positions(cur: psycopg.Cursor[Any], *names: str) -> tuple[int, ...]:
    """Where the named columns are in the rows `cur` just fetched as tuples."""
    found = [col.name for col in cur.description or ()]
    return tuple(found.index(n) for n in names)


def repair_instants(
    cur: psycopg.Cursor[Row],
    conn: psycopg.Connection,
    name: str,
    lock_pid: int | None,
    log: EventLog,
    occurrences: Occurrences,
    computing: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> bool:
    """Stored instants no cron or policy produces, repaired (sql/55_repair.sql), a log
    line each: leases longer than a runner may take reaped, retries held back beyond
    the retry cap brought to it, and schedules due later than their cron's next
    occurrence after now() re-armed to it. True when anything was repaired. A schedule
    whose next occurrence cannot be computed here is left to the tick, which sets it
    aside."""
    with conn.transaction():
        check_lock_in_transaction(cur, lock_pid)
        fixed = cur.execute(sql.REPAIR_INSTANTS, (name,)).fetchall()
    rearmed: list[Row] = []
    try:
        with conn.transaction():
            check_lock_in_transaction(cur, lock_pid)
            pairs = cur.execute(sql.ARMED_SCHEDULE_CRONS).fetchall()
            if pairs:
                db_now = pairs[0]["db_now"]
                with computing():
                    nexts = occurrences.after_each([(p["cron"], p["timezone"]) for p in pairs], db_now)
                ok = [(p, n) for p, n in zip(pairs, nexts) if not isinstance(n, Exception)]
                if ok:
                    rearmed = cur.execute(
                        sql.REARM_SCHEDULES_AHEAD,
                        ([p["cron"] for p, _ in ok], [p["timezone"] for p, _ in ok], [n for _, n in ok], name),
                    ).fetchall()
    except psycopg.Error as e:
        # the server's zone rules and ours disagree on an instant: the tick must go on
        if e.sqlstate != INVALID_TICK_CALL:
            raise
        log("schedule re-arm refused", level="error", reason=one_line(e.diag.message_primary or str(e)))
    with log.batch():
        for r in fixed:
            log(
                "lease reaped" if r["kind"] == "LEASE" else "retry delay repaired",
                level="warning",
                run_id=r["run_id"],
                worker=r["worker_name"],
                was=r["was"].isoformat() if r["was"] else None,
                repaired_to=r["repaired_to"].isoformat() if r["repaired_to"] else None,
                reason=r["message"],
            )
        for r in rearmed:
            log(
                "schedule re-armed",
                level="warning",
                worker=r["worker_name"],
                was=r["was"].isoformat(),
                next_run_at=r["next_run_at"].isoformat(),
                reason="next_run_at was later than the next occurrence of its cron: a clock ahead, or written by hand",
            )
    return bool(fixed or rearmed)


def announce_alerts(cur: psycopg.Cursor[Row], conn: psycopg.Connection, lock_pid: int | None) -> None:
    """The new alerts sent on scrinalia_alerts, each once (sql/88_alerts.sql), at the commit."""
    with conn.transaction():
        check_lock_in_transaction(cur, lock_pid)
        cur.execute(sql.ANNOUNCE_ALERTS)


def prune_expired(
    cur: psycopg.Cursor[Row],
    conn: psycopg.Connection,
    lock_pid: int | None,
    log: EventLog,
    heartbeat: Callable[[], None],
) -> None:
    """The retention (sql/85_retention.sql): when a sweep is due or under way, a few
    small batches, each its own transaction, the heartbeat between them; a `pruned`
    line when it removed runs or finished its sweep."""
    removed, last = 0, None
    for n in itertools.count(1):
        if n > 1:
            heartbeat()
        with conn.transaction():
            check_lock_in_transaction(cur, lock_pid)
            row = cur.execute(sql.PRUNE_EXPIRED_RUNS, (n,)).fetchone()
        if row is None:
            break
        removed, last = removed + row["removed"], row
        if not row["more"]:
            break
    if last is not None and (removed or last["finished"]):
        log(
            "pruned",
            count=removed,
            cutoff=last["cutoff"].isoformat(),
            finished=last["finished"],
            sweep_count=last["sweep_removed"],
        )
