"""Small helpers shared by the tests: a catalogue, a worker, SQLSTATEs, a tick, a log stream."""

from __future__ import annotations

import array
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import termios
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from scrinalia_workers import cron

CATALOGUE = {
    "engines": {
        "tesseract": {
            "engine_options": {"psm": {"type": "integer"}, "oem": {"type": "integer", "values": [0, 1, 2, 3]}}
        },
        "easyocr": {"engine_options": {"gpu": {"type": "boolean"}}},
    },
    "presets": {"fast": {"options": {"dpi": 150}}, "archival": {"options": {"dpi": 600, "deskew": True}}},
    "options": {
        "dpi": {"type": "integer"},
        "lang": {"type": "string", "values": ["por", "eng"]},
        "deskew": {"type": "boolean"},
        "threshold": {"type": "number"},
    },
    "default_config": {"engine": "tesseract", "options": {"dpi": 300, "lang": "por"}},
}


def make_worker(conn: psycopg.Connection, name: str = "ocr", catalogue: dict = CATALOGUE) -> str:
    conn.execute(
        "SELECT scrinalia.register_worker(%s, %s, %s, %s, %s)",
        (
            name,
            Jsonb(catalogue["engines"]),
            Jsonb(catalogue["presets"]),
            Jsonb(catalogue["options"]),
            Jsonb(catalogue["default_config"]),
        ),
    )
    return name


def make_workers(conn: psycopg.Connection, n: int, prefix: str = "w") -> list[str]:
    names = [f"{prefix}{i:05d}" for i in range(n)]
    conn.execute("INSERT INTO scrinalia.archive_workers (worker_name) SELECT unnest(%s::text[])", (names,))
    return names


@contextmanager
def raises_sqlstate(sqlstate: str, *fragments: str):
    """Asserts the block raises a database error with this SQLSTATE and message parts."""
    try:
        yield
    except psycopg.Error as e:
        assert e.sqlstate == sqlstate, f"expected {sqlstate}, got {e.sqlstate}: {e}"
        msg = e.diag.message_primary or ""
        for f in fragments:
            assert f in msg, f"{f!r} not in {msg!r}"
    else:
        raise AssertionError(f"expected SQLSTATE {sqlstate}, nothing was raised")


def put_schedule(
    conn,
    worker: str,
    cron: str = "0 2 * * *",
    tz: str | None = "Europe/Berlin",
    request: dict | None = None,
    enabled: bool = True,
):
    return conn.execute(
        "SELECT * FROM scrinalia.put_schedule(%s, %s, %s, %s, %s, 'test')",
        (worker, cron, tz, Jsonb(request or {}), enabled),
    ).fetchone()


def set_next_run(conn, worker: str, ago: timedelta | str) -> None:
    """Moves a schedule's next_run_at into the past: the clock is data."""
    conn.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - %s::interval WHERE worker_name = %s",
        (str(ago) if isinstance(ago, str) else ago, worker),
    )


def tick(conn, advance: str = "1 hour", only: list[str] | None = None):
    """Runs one tick as the scheduler does, each next instant the first occurrence of
    the schedule's cron after now() + advance (a real occurrence: the tick refuses any
    other; `advance` keeps a frequent cron from coming due again during a test).

    Returns (due rows, decisions).
    """
    with conn.transaction():
        due = conn.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()
        names = [r[0] for r in due if only is None or r[0] in only]
        nexts = [
            cron.next_occurrence(r[1], r[2], r[4] + _interval(advance)) for r in due if only is None or r[0] in only
        ]
        decisions = conn.execute(
            "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason "
            "FROM scrinalia.tick(%s::text[], %s::timestamptz[], 'test')",
            (names, nexts),
        ).fetchall()
    return due, decisions


def next_occurrence(conn, worker: str, advance: str = "1 hour"):
    """The first occurrence of `worker`'s schedule after now() + advance: an instant the
    tick accepts as its next."""
    c, tz, now = conn.execute(
        "SELECT cron, timezone, now() FROM scrinalia.archive_worker_schedules WHERE worker_name = %s", (worker,)
    ).fetchone()
    return cron.next_occurrence(c, tz, now + _interval(advance))


def _interval(text: str) -> timedelta:
    n, unit = text.split()
    return timedelta(**{unit if unit.endswith("s") else unit + "s": float(n)})


def claim(conn, runner: str = "r1", lease: str = "5 minutes", workers: list[str] | None = None):
    return conn.execute(
        "SELECT run_id, lease_token, worker_name, attempt, trigger FROM scrinalia.claim_next(%s, %s::interval, %s)",
        (runner, lease, workers),
    ).fetchone()


def finish(conn, run_id: int, token, status: str = "SUCCEEDED", error: str | None = None):
    return conn.execute(
        "SELECT status, error, error_fingerprint, duration, retry_pending FROM scrinalia.finish(%s, %s, %s, %s)",
        (run_id, token, status, error),
    ).fetchone()


def waiting_on_a_lock(conn: psycopg.Connection, pid: int) -> bool:
    """Whether backend `pid` is waiting for a lock (pg_stat_activity)."""
    return bool(
        conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]
    )


def plan_reads(conn, sql: str) -> tuple[int, int]:
    """One call of `sql` under EXPLAIN (ANALYZE, BUFFERS): the rows it returned and the
    pages it read, its functions' statements included."""
    (plan,) = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}").fetchone()
    top = plan[0]["Plan"]
    return top["Actual Rows"], top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def nested_plans(conn, analyze: bool = False) -> list[str]:
    """From now on in the session `conn`, the plan of every statement, its functions'
    statements included, as auto_explain reports them (notices): the list they are
    appended to. `analyze`: with the figures of the run."""
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    settings = ["log_min_duration = 0", "log_nested_statements = on", "log_level = notice"]
    for setting in settings + (["log_analyze = on"] if analyze else []):
        conn.execute(f"SET auto_explain.{setting}")
    conn.execute("LOAD 'auto_explain'")
    return plans


def heap_pages(conn, table: str) -> int:
    """The pages of a table's heap, as its last VACUUM or ANALYZE counted them."""
    return conn.execute("SELECT relpages FROM pg_class WHERE oid = %s::regclass", (table,)).fetchone()[0]


def run_row(conn, run_id: int) -> dict:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)).fetchone()


def table_fingerprints(conn: psycopg.Connection) -> dict[str, tuple[int, str]]:
    """(row count, md5 of all rows) of every table in the scrinalia schema."""
    tables = [
        r[0]
        for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'scrinalia' ORDER BY 1").fetchall()
    ]
    out = {}
    for t in tables:
        out[t] = conn.execute(
            f"SELECT count(*), coalesce(md5(string_agg(x::text, E'\\n' ORDER BY x::text)), '') FROM scrinalia.\"{t}\" x"
        ).fetchone()
    return out


# A cron whose occurrences are a year apart: a test whose schedules are due by hand
# cannot see a minute boundary (a minutely cron's next occurrence passing mid-test)
# re-due one or move it past what the test expects.
YEARLY = "0 0 1 1 *"


def due_yearly(conn, names: list[str]) -> None:
    """Schedules for `names` on YEARLY, due 30 seconds ago."""
    conn.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, %s, 'UTC', now() - interval '30 seconds' FROM unnest(%s::text[]) w",
        (YEARLY, names),
    )


@contextmanager
def lock_holding_scheduler(dsn: str, name: str):
    """A Scheduler holding the lock in this process, its events captured as JSON lines
    (`.events()`)."""
    from scrinalia_workers.logs import EventLog
    from scrinalia_workers.scheduler import Scheduler

    out = io.StringIO()
    s = Scheduler(dsn, name=name, log=EventLog(json_lines=True, stream=out))
    assert s._acquire()
    s.events = lambda: [json.loads(x) for x in out.getvalue().splitlines()]  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        s._close()


def two_attempt_period(conn, last_status: str, error: str | None = None) -> None:
    """Workers ocr and idle; ocr's 2026-01-01 period: attempt 1 FAILED, its retry
    ended `last_status` (written by hand, as a restore would)."""
    conn.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('ocr'), ('idle')")
    [(first,)] = conn.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, scheduled_for, finished_at) "
        "VALUES ('ocr', 'SCHEDULE', 'FAILED', '2026-01-01', now()) RETURNING run_id"
    ).fetchall()
    conn.execute(
        "INSERT INTO scrinalia.archive_worker_runs "
        "(worker_name, trigger, status, attempt, retry_of, scheduled_for, finished_at, error) "
        "VALUES ('ocr', 'SCHEDULE', %s, 2, %s, '2026-01-01', now(), %s)",
        (last_status, first, error),
    )


def scheduled_run(conn, worker: str) -> int:
    """A SCHEDULE run of the worker (a schedule armed, then moved due, then ticked); its run_id."""
    put_schedule(conn, worker, "* * * * *", "UTC")
    tick(conn)  # arm
    set_next_run(conn, worker, "1 minute")
    _, decisions = tick(conn)
    return [d[2] for d in decisions if d[1] == "ENQUEUED"][0]


class FlushCountingStream(io.StringIO):
    """A log stream that counts its flushes (each one a write to the pipe)."""

    def __init__(self):
        super().__init__()
        self.flushes = 0

    def flush(self):
        self.flushes += 1
        super().flush()


# --- the scrinalia-workers command line as a subprocess ---

ENV_DB_VARS = ("DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


@dataclass
class Result:
    code: int
    out: str
    err: str


def cli(*args: str, dsn: str | None = None, env: dict | None = None) -> Result:
    argv = [sys.executable, "-m", "scrinalia_workers", *args]
    if dsn is not None:
        argv += ["--dsn", dsn]
    base = {k: v for k, v in os.environ.items() if k not in ENV_DB_VARS}
    p = subprocess.run(argv, capture_output=True, text=True, env={**base, **(env or {})}, timeout=60)
    return Result(p.returncode, p.stdout, p.stderr)


def assert_one_line_error(r: Result, code: int, *fragments: str) -> None:
    assert r.code == code, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("scrinalia-workers: error: "), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# --- the code migrate installs, for the rolling-deploy tests ---


def sql_variant(tmp_path: Path) -> Path:
    """This release's migrations and SQL, each ledger function with another body: a
    migrate from it, then from the release's own, changes the code clients call."""
    from scrinalia_workers import sqlfiles

    root = sqlfiles.project_root()
    variant = tmp_path / "variant"
    shutil.copytree(root / "migrations", variant / "migrations")
    shutil.copytree(root / "sql", variant / "sql")
    changed = 0
    for name in ("30_enqueue.sql", "31_claim.sql", "33_leases.sql", "34_outcomes.sql", "36_run_ends.sql"):
        ledger = variant / "sql" / name
        text = ledger.read_text()
        changed += text.count("\nBEGIN\n")
        ledger.write_text(text.replace("\nBEGIN\n", "\nBEGIN\n    -- the variant's body\n"))
    assert changed >= 5
    return variant


def code_digest(conn) -> str:
    """A digest of every scrinalia function, by name, arguments and body: it changes when
    migrate changes the code (ordered by name, so a dropped and re-created one counts the same)."""
    return conn.execute(
        "SELECT md5(string_agg(p.proname || pg_get_function_identity_arguments(p.oid) || p.prosrc, ';'"
        " ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)))"
        " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'scrinalia'"
    ).fetchone()[0]


def blocked_writing_its_log(p: subprocess.Popen) -> bool:
    """The process's log pipe (its stderr, never read) is at least half full and one of
    its threads sits in a system call on fd 2: a write that waits for a reader."""
    assert p.stderr is not None
    unread = array.array("i", [0])
    fcntl.ioctl(p.stderr.fileno(), termios.FIONREAD, unread)
    if unread[0] < fcntl.fcntl(p.stderr.fileno(), fcntl.F_GETPIPE_SZ) // 2:
        return False
    for task in Path(f"/proc/{p.pid}/task").iterdir():
        try:
            fields = (task / "syscall").read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        if len(fields) > 1 and fields[1] == "0x2":
            return True
    return False


def migrations_from(first: str) -> list[str]:
    """This release's migration ids from `first` to the head, in the order migrate
    applies them (reversed: what a rollback to below `first` undoes)."""
    from scrinalia_workers.admin.migrate import head_ids

    ids = head_ids()
    return ids[ids.index(first) :]


def rollback_to(dsn: str, first: str) -> list[str]:
    """Rolls back this release's migrations down to `first` (included); what the
    rollback answered (expected: migrations_from(first) reversed)."""
    from scrinalia_workers.admin.migrate import rollback

    return rollback(dsn, count=len(migrations_from(first)))
