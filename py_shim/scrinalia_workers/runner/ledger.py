"""The runner's one connection and the SQL API calls it makes on it (gateway/statements/runner.py).

Claims, heartbeats, reports and releases are fenced by the lease token: a call for a
run whose lease is gone answers why (a lost_reason, SW020's reasons) instead of
changing it. Which answers end which run is decided here; when to call, by the batch
(runner/batch.py).
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg.types.string import TextBinaryLoader

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.errors import DatabaseUnavailable
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.gateway.statements.runner import (
    CLAIM_RUNS,
    CLEAR_STUCK,
    FINISH_RUNS,
    HEARTBEAT_RUNS,
    LISTEN_FOR_RUNS,
    RELEASE_RUNS,
    REPORT_STUCK,
    REPORT_STUCK_EXIT,
    RUN_ROW_ENUMS,
    SECONDS_TO_NEXT_CLAIMABLE,
    UNLISTEN_FOR_RUNS,
)
from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.runner.run import ClaimedRun, Reported
from scrinalia_workers.runner.run_states import RunState
from scrinalia_workers.runner.settings import DEFAULTS, RunnerSettings

_RAW_DECODE = json.JSONDecoder().raw_decode


def _json_loads(data: bytes | str) -> Any:
    """json.loads, with the usual empty object (a run's request, config and config
    sources, three a claimed run) answered without the parser, and the rest parsed
    as the server writes it: UTF-8 (no guess of the encoding), no surrounding
    whitespace (no scans for it; json.loads when there is some after all)."""
    if data == b"{}":
        return {}
    text = data.decode() if isinstance(data, bytes) else data
    try:
        value, end = _RAW_DECODE(text)
    except ValueError:  # (leading whitespace: json.loads takes it, or raises its own error)
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


class Ledger:
    """Connects on demand; every call reconnects after a broken connection. LISTENs only
    while the runner stands by (listen() before its look at the queue, unlisten() once
    a claim brings work)."""

    def __init__(
        self,
        dsn: str,
        runner_id: str,
        lease: timedelta,
        log: EventLog,
        clock: Clock = SYSTEM,
        settings: RunnerSettings = DEFAULTS,
    ):
        self.dsn = dsn
        self.runner_id = runner_id
        self.lease = lease
        self.log = log
        self.clock = clock
        self.settings = settings
        self.conn: psycopg.Connection | None = None
        self.listening = False
        self.enums_loaded = False  # the run row's enums registered on this connection

    # -- the connection ------------------------------------------------------------

    def connect(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.close()
            # DatabaseUnavailable when the server is away: run_forever backs off and retries
            self.conn = db.connect(self.dsn, application_name=f"scrinalia-runner {self.runner_id}")
            self.listening = False
            self.enums_loaded = False
            set_json_loads(_json_loads, self.conn)
        return self.conn

    def listen(self) -> psycopg.Connection:
        """The connection, LISTENing: a run made claimable from here on wakes the runner
        (one made so before is seen by the look at the queue that follows)."""
        conn = self.connect()
        if not self.listening:
            conn.execute(LISTEN_FOR_RUNS)
            self.listening = True
        return conn

    def unlisten(self) -> None:
        """Busy with a backlog: no NOTIFY is queued for this session meanwhile."""
        if self.listening:
            self.connect().execute(UNLISTEN_FOR_RUNS)
            self.listening = False

    def close(self) -> None:
        self.listening = False
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    # -- the calls -----------------------------------------------------------------

    def claim(self, workers: list[str] | None, limit: int) -> list[ClaimedRun]:
        """claim_runs(): up to `limit` runs of these workers (None: any), leased to this runner."""
        conn = self.connect()
        if not self.enums_loaded:
            for (oid,) in conn.execute(RUN_ROW_ENUMS).fetchall():
                conn.adapters.register_loader(oid, TextBinaryLoader)  # as str, like text
            self.enums_loaded = True
        cur = conn.cursor(row_factory=dict_row, binary=True)
        rows = cur.execute(CLAIM_RUNS, (self.runner_id, self.lease, workers, limit)).fetchall()
        return [ClaimedRun.from_row(row) for row in rows]

    def seconds_to_next_claimable(self, workers: list[str] | None) -> float | None:
        """How long until a run of these workers can be claimed (<= 0: now); None: none queued."""
        row = self.connect().cursor(row_factory=dict_row).execute(SECONDS_TO_NEXT_CLAIMABLE, (workers,)).fetchone()
        wait = row["wait"] if row is not None else None
        return None if wait is None else float(wait)

    def heartbeat(self, runs: list[ClaimedRun]) -> dict[int, str]:
        """Extends the leases; returns why each lost lease is lost, by run id. Never
        raises: a failed heartbeat is logged and tried again (once at once on a new
        connection, then next beat)."""
        args = ([r.run_id for r in runs], [r.lease_token for r in runs])

        def failed(e: BaseException) -> None:
            for run in runs:
                self.log("heartbeat error", level="warning", run_id=run.run_id, reason=one_line(e))

        for _ in range(2):
            try:
                rows = self.connect().cursor(row_factory=dict_row).execute(HEARTBEAT_RUNS, args).fetchall()
            except psycopg.Error as e:
                failed(e)
                if not is_transient(e):
                    return {}
                self.close()
                continue
            except Exception as e:  # DatabaseUnavailable (no server), or anything else
                failed(e)
                return {}
            return {row["run_id"]: row["lost_reason"] for row in rows if row["lost_reason"] is not None}
        return {}

    def report_stall(self, run_ids: list[int] | None, threads: int = 0, grace: float = 0.0) -> None:
        """Says in the database that every one of the `threads` handler threads holds one
        of `run_ids`, told to stop, and that the runner exits `grace` seconds from now
        unless one returns; `run_ids` None: a handler returned, the stall is over. Never
        raises: the log has said it already, and a stall the database missed must not
        stop the runner from claiming."""
        args: tuple[Any, ...] = (self.runner_id,) if run_ids is None else (self.runner_id, run_ids, threads, grace)
        self._say_stall(CLEAR_STUCK if run_ids is None else REPORT_STUCK, args)

    def report_stuck_exit(self) -> None:
        """The runner exits for its stall: its row stays, said exited. Never raises."""
        self._say_stall(REPORT_STUCK_EXIT, (self.runner_id,))

    def _say_stall(self, statement: str, args: tuple[Any, ...]) -> None:
        try:
            self.connect().execute(statement, args)
        except Exception as e:  # psycopg.Error, DatabaseUnavailable, or anything else
            self.log("stall report error", level="warning", reason=one_line(e))
            if isinstance(e, psycopg.Error) and is_transient(e):
                self.close()

    def release(self, runs: list[ClaimedRun], reason: str) -> set[int]:
        """Gives runs not started back to the queue; returns the ids given back. Never
        raises: after a database error they come back when their leases end (the
        reaper; the retry policy applies)."""
        try:
            rows = (
                self.connect()
                .cursor(row_factory=dict_row)
                .execute(RELEASE_RUNS, ([r.run_id for r in runs], [r.lease_token for r in runs]))
                .fetchall()
            )
        except Exception as e:  # psycopg.Error, DatabaseUnavailable, or anything else
            self.log("release error", level="warning", runs=len(runs), reason=one_line(e))
            self.close()
            return set()
        return {row["run_id"] for row in rows}

    def report(self, runs: list[ClaimedRun], *, stopping: bool) -> dict[int, Reported]:
        """finish_runs() for the runs' outcomes; what came of each. Transient errors
        are retried until the leases would be gone; after that the reaper ends the
        runs and the retry policy applies (UNREPORTED). A database error that is not
        transient propagates."""
        give_up = self.clock.monotonic() + min(
            self.lease.total_seconds(), self.settings.stopping_report_retry if stopping else math.inf
        )
        backoff = Backoff(base=0.1, cap=2.0)
        retried = False
        while True:
            try:
                answers = self._finish_runs(runs)
                break
            except psycopg.Error as e:
                if not is_transient(e):
                    raise
                reason = one_line(e)
            except DatabaseUnavailable as e:
                reason = one_line(e)
            self.close()
            if self.clock.monotonic() >= give_up:
                why = f"database unavailable for the lease's length: {reason}"
                return {run.run_id: Reported(RunState.UNREPORTED, why) for run in runs}
            self.log("database unavailable", level="warning", runs=",".join(str(r.run_id) for r in runs), reason=reason)
            self.clock.sleep(backoff.next_delay())
            retried = True
        came = {}
        for run in runs:
            assert run.outcome is not None  # a DONE run
            lost = answers[run.run_id]
            # after a retry, "the run is <our status>": the first call committed, only its answer was lost
            if lost is not None and not (retried and lost == f"the run is {run.outcome.status}"):
                came[run.run_id] = Reported(RunState.LEASE_LOST, lost)
            else:
                came[run.run_id] = Reported(RunState.REPORTED, None)
        return came

    def _finish_runs(self, runs: list[ClaimedRun]) -> dict[int, str | None]:
        """One finish_runs() call; {run_id: lost_reason (None: recorded)}."""
        conn = self.connect()
        outcomes = [run.outcome for run in runs]
        assert all(outcomes)
        ids = [run.run_id for run in runs]
        tokens = [run.lease_token for run in runs]
        statuses = [o.status for o in outcomes if o]
        errs = [o.error for o in outcomes if o]
        fps = [o.fingerprint for o in outcomes if o]
        # NULL arrays for a batch of successes (the rule): nothing to build or send
        errors, fingerprints = (errs, fps) if any(errs) or any(fps) else (None, None)
        cur = conn.cursor()  # tuples (run_id, status, lost_reason): no dict per run
        try:
            rows = cur.execute(FINISH_RUNS, (ids, tokens, statuses, errors, fingerprints)).fetchall()
        except (psycopg.errors.DataException, UnicodeEncodeError):
            # a text does not fit the database's encoding (a LATIN1 database and a
            # Chinese file name; psycopg refuses it, or the server): store them
            # ASCII-escaped rather than not at all
            if errors is None:
                raise
            errors = [e.encode("ascii", "backslashreplace").decode("ascii") if e else None for e in errors]
            rows = cur.execute(FINISH_RUNS, (ids, tokens, statuses, errors, fingerprints)).fetchall()
        return {run_id: lost for run_id, _, lost in rows}
