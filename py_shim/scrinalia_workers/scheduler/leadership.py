"""The lock session's state machine: which process ticks, decided by an advisory lock.

Exactly one scheduler ticks: the one whose *lock session* holds the advisory lock
scrinalia.scheduler_lock_key(). The database is the authority on who holds it; this
process only decides, from what the database answers, whether it may act as the
holder. Any login can take the key or send a NOTIFY, so holding is re-checked
(scrinalia.scheduler_heartbeat()) before every pass and between chunks. A standby's
lock session waits for the lock *in its queue* (scrinalia.take_scheduler_lock()) and
stays there, so that a squatter's try-lock, or a later wait of any login, is behind it
and the lock comes to it when it frees; every standby_retry, from its other session
(the look session) while the lock session keeps its place, it ends a holder that
keeps the lock from a scheduler (scrinalia.evict_lock_holder(): at once one that
never wrote a heartbeat, after SCHEDULER_STALE_AFTER a frozen scheduler or one that
heartbeats and leaves due schedules unhandled; never a superuser's session): the
lock goes to the next in the queue, and the standby looks again LOOK_AGAIN later
until it is its own. A holder's lock session is ended by the server when it is idle a
few seconds (idle_session_timeout; a thread of the process keeps it busy while the
process runs, sessions._KeepAlive), so a frozen holder frees the lock within seconds
even where no standby may end a session.

States
------

::

                 start
                   |
                   v
             +-----------+   lock not got within standby_retry (in the
      +----->|  STANDBY  |   queue): evict the holder, or name it
      |      |           |------+
      |      +-----------+<-----+
      |        |       |
      |  got   |       | error
      |  it    v       v
      |  +---------+  +----------------------------+
      |  | HOLDING |->|            LOST            |
      |  +---------+  | both sessions closed; waits|
      |   lost, or    | the reconnect backoff      |
      |   error       +----------------------------+
      |                              |
      +------------------------------+

    any state --stop--> STOPPED: the lock released if HOLDING, both sessions
                        closed; final

Transitions, what triggers them and what is logged
--------------------------------------------------

- STANDBY -> HOLDING: the attempt got the lock, the schema is current, the work session
  is open and the first heartbeat says we hold it. Logs ``lock acquired``. The
  reconnect backoff starts over.
- STANDBY -> STANDBY: the lock stayed with another session for standby_retry (or
  LOOK_AGAIN after an eviction). If that holder is not a scheduler (idle, or seen at
  the last look, without a heartbeat of its own), does not schedule, or its heartbeat
  is stale, it is ended (logs ``stale holder evicted``, warning) and the next look
  comes LOOK_AGAIN later. Otherwise the holder is named (logs
  ``standby``: info when it is a live scheduler, error when it is not a scheduler or
  when it is stale and the database refused to end it, with that reason), at most once
  per HOLDER_REPORT_EVERY while it stays the same. No sleep: the wait is the pacing.
- STANDBY -> LOST: the attempt failed (database unavailable, an unexpected error),
  also after the lock was got but before ``lock acquired`` was said. Logs ``standby``
  (warning, with retry_in).
- HOLDING -> HOLDING: a pass failed for a reason of its own (a row, a bug) while the
  sessions are sound: the daemon logs ``pass error`` and passes again after a backoff.
- HOLDING -> LOST: a heartbeat says the lock is no longer ours, or the in-transaction
  check of a tick refuses (NOT_LOCK_HOLDER): logs ``lock lost`` with the reason. Or
  the lock session or the database went away (what a frozen holder meets when it
  resumes: a standby or the idle timeout ended its sessions): logs ``lock lost`` with
  retry_in and SESSIONS_ENDED. No
  pass runs after this: the tick transactions check the lock themselves.
- LOST -> STANDBY: the backoff delay (doubling up to standby_retry, jittered) passed.
- any -> STOPPED: the stop event is set; logs ``stopping``. From HOLDING the lock is
  released before the sessions close, so a standby takes over at its next attempt.

A configuration error (the schema moved under a standby, a transaction-mode pooler
in the way) is not a transition: it leaves run() and the process exits 2.

The lock session is an interface (LockSession): scheduler.sessions.Sessions is the real
one; the tests drive this machine with a fake and a fake clock, without a database.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.errors import ConfigError, LockLost
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.text import HIDDEN

# How often a standby repeats who holds the lock when nothing changed.
HOLDER_REPORT_EVERY = 60.0
# Said when the holder's sessions break under it.
SESSIONS_ENDED = (
    "the sessions holding the lock were closed: ended by a standby that found them stale, by the"
    " server's idle_session_timeout, or the database went away; no pass runs until the lock is ours again"
)
# How evict_lock_holder()'s reason begins when the database refused to end the session.
REFUSED = "cannot end the session"
# How soon a standby looks again after it ended a holder, or found one that is not a
# scheduler and is ended at the second look: the next squatter in the queue, ahead of
# this standby, has the lock then, and is ended in turn.
LOOK_AGAIN = 0.1


class State(enum.Enum):
    STANDBY = "standby"
    HOLDING = "holding"
    LOST = "lost"
    STOPPED = "stopped"


class LockSession(Protocol):
    """What the state machine asks of the database (scheduler.sessions.Sessions)."""

    def acquire(self, wait: float = 0.0) -> bool:
        """One attempt at the lock, waiting in the lock's queue at most `wait` seconds;
        True when held and ready to tick."""
        ...

    def heartbeat(self) -> bool:
        """Whether this session still holds the lock; records the heartbeat when it does."""
        ...

    def evict_stale(self, seen_pid: int | None = None) -> dict[str, Any]:
        """Ends a holder that is not a scheduler (idle, or `seen_pid` seen holding it
        before) or whose heartbeat is stale: evicted, holder_pid, holder_role, reason."""
        ...

    def holder(self) -> dict[str, Any]:
        """Who holds the lock: holder_pid, holder_role, holder_application,
        holder_backend_start, holder_is_scheduler, heartbeat_at."""
        ...

    def release(self) -> None: ...

    def close(self) -> None: ...


class Leadership:
    """The lock session's states (see the module docstring); run() drives them."""

    def __init__(
        self,
        session: LockSession,
        *,
        name: str,
        log: EventLog,
        stop: threading.Event,
        standby_retry: float = 3.0,
        clock: Clock = SYSTEM,
        reconnect: Backoff | None = None,
    ):
        self.session = session
        self.name = name
        self.log = log
        self.stop = stop
        self.standby_retry = standby_retry
        self.clock = clock
        self.reconnect = reconnect or Backoff(base=0.2, cap=max(standby_retry, 0.2))
        self.state = State.STANDBY
        self.retry_in = 0.0  # in LOST: how long before the next attempt
        self._holder_seen: tuple | None = None
        self._holder_logged_at: float | None = None
        self._unevicted: int | None = None  # a holder not a scheduler, seen at the last look
        self._look_in = standby_retry  # how long the next attempt waits before the next look

    # --- the loop --------------------------------------------------------------------

    def run(self, hold: Callable[[], None]) -> None:
        """Steps from state to state until the stop event is set. `hold` runs the passes
        while HOLDING: it returns when asked to stop and raises when the lock, or the
        sessions, are lost."""
        while not self.stop.is_set():
            if self.state is State.STANDBY:
                self._standby_step()
            elif self.state is State.HOLDING:
                self._holding_step(hold)
            elif self.state is State.LOST:
                self.clock.wait(self.stop, self.retry_in)
                self.state = State.STANDBY
            else:
                raise RuntimeError(f"the lock session is {self.state.value}: it does not run again")
        self.close()

    def _standby_step(self) -> None:
        # no sleep between attempts: the attempt itself waits in the lock's queue, so a
        # squatter's try-lock fails behind it and the lock comes here when it frees
        try:
            if self.attempt(self._look_in):
                return
            self._look_in = self.standby_retry if self._stand_by() else min(LOOK_AGAIN, self.standby_retry)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - transient or not, never a crash loop
            self._fail(e)

    def _holding_step(self, hold: Callable[[], None]) -> None:
        try:
            hold()
        except LockLost as e:
            self.log("lock lost", level="warning", name=self.name, reason=str(e))
            self._lose(self.reconnect.next_delay())
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - transient or not, never a crash loop
            self._fail(e)

    # --- transitions -----------------------------------------------------------------

    def attempt(self, wait: float = 0.0) -> bool:
        """STANDBY -> HOLDING when the lock is got (waiting in its queue at most `wait`
        seconds); True then."""
        if self.state is not State.STANDBY:
            raise RuntimeError(f"an attempt at the lock from {self.state.value}")
        if not self.session.acquire(wait):
            return False
        self.state = State.HOLDING
        self.reconnect.reset()
        self._holder_seen = None
        self.log("lock acquired", name=self.name)
        return True

    def check(self) -> None:
        """While HOLDING: the heartbeat, which must say the lock is still ours; else LockLost."""
        if self.state is not State.HOLDING:
            raise LockLost(f"the lock session is {self.state.value}")
        try:
            held = self.session.heartbeat()
        except psycopg.Error as e:
            # a broken session is what a holder frozen, then resumed, meets
            raise LockLost(f"{one_line(e)} ({SESSIONS_ENDED})" if is_transient(e) else one_line(e)) from e
        if not held:
            raise LockLost("the lock is no longer held by our session")

    def _fail(self, e: Exception) -> None:
        """An error in STANDBY or HOLDING: -> LOST, said as `lock lost` when we held it."""
        delay = self.reconnect.next_delay()
        what = "database unavailable" if is_transient(e) else f"unexpected error {type(e).__name__}"
        reason = f"{what}: {one_line(e)}"
        if self.state is State.HOLDING and is_transient(e):
            # what a holder that was frozen, then resumed, meets: its sessions were ended
            reason += f" ({SESSIONS_ENDED})"
        self.log(
            "lock lost" if self.state is State.HOLDING else "standby",
            level="warning",
            name=self.name,
            reason=reason,
            retry_in=round(delay, 2),
        )
        self._lose(delay)

    def _lose(self, delay: float) -> None:
        self.session.close()
        self._look_in = self.standby_retry
        self.state = State.LOST
        self.retry_in = delay

    def close(self) -> None:
        """-> STOPPED: the lock released when held, the sessions closed."""
        if self.state is State.STOPPED:
            return
        self.log("stopping", name=self.name)
        if self.state is State.HOLDING:
            try:
                self.session.release()
            except psycopg.Error:
                pass
        self.session.close()
        self.state = State.STOPPED

    # --- standing by -----------------------------------------------------------------

    def _stand_by(self) -> bool:
        """Someone else holds the lock: end its session if it is stale (frozen, not
        scheduling, or not a scheduler at all), else say who it is (at a bounded rate).
        True when the holder stays (a live scheduler, or one this standby cannot end):
        the next look is then a standby_retry away; else it comes at once."""
        ev = self.session.evict_stale(self._unevicted)
        # the same pid still there at the next look, still without a heartbeat, is ended
        self._unevicted = None if ev["evicted"] else ev["holder_pid"]
        if ev["evicted"]:
            self.log(
                "stale holder evicted",
                level="warning",
                name=self.name,
                holder_pid=ev["holder_pid"],
                holder_role=ev["holder_role"],
                reason=ev["reason"],
            )
            return False
        st = self.session.holder()
        if st["holder_pid"] is None:
            return False  # it went between the two looks: the lock comes to our queued session
        scheduler = bool(st["holder_is_scheduler"]) and st.get("heartbeat_pid", st["holder_pid"]) == st["holder_pid"]
        refused = (ev["reason"] or "").startswith(REFUSED)
        stays = scheduler or refused
        seen = (st["holder_pid"], st["holder_role"], scheduler, refused)
        now = self.clock.monotonic()
        if (
            seen == self._holder_seen
            and self._holder_logged_at is not None
            and now - self._holder_logged_at < HOLDER_REPORT_EVERY
        ):
            return stays
        self._holder_seen, self._holder_logged_at = seen, now
        holder = dict(
            holder_pid=st["holder_pid"],
            holder_role=st["holder_role"],
            holder_application=HIDDEN if st["holder_application"] is None else st["holder_application"],
            holder_since=HIDDEN if st["holder_backend_start"] is None else st["holder_backend_start"],
            heartbeat_at=st["heartbeat_at"],
            retry_every=self.standby_retry,
            eviction=ev["reason"],
        )
        if not scheduler:
            reason = "the scheduler lock is held by a session that is NOT a scheduler: nothing ticks while it holds it"
        elif refused:
            reason = "the scheduler holding the lock is stale and this standby cannot end its session"
        else:
            self.log("standby", name=self.name, **holder, reason="another scheduler holds the lock")
            return stays
        self.log("standby", level="error", name=self.name, **holder, reason=f"{reason} ({ev['reason']})")
        return stays
