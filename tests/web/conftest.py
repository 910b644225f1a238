"""The web view's fixtures: a ledger with a few workers, a failed chain, an alert and an
active run; planted hostile text; the real `scrinalia-workers web` process on a free
loopback port, as a given login."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from psycopg.types.json import Jsonb
from webview import CHAIN_ERRORS, HOSTILE, SERVING, WebProc

from helpers import make_worker, put_schedule, tick
from scrinalia_workers.testkit.waiting import wait_for


@pytest.fixture
def start_web():
    """start_web(dsn, *args) -> a running `scrinalia-workers web` on 127.0.0.1, a free port."""
    started: list[WebProc] = []

    def _start(dsn: str, *args: str) -> WebProc:
        argv = [sys.executable, "-m", "scrinalia_workers", "web", "--dsn", dsn, "--bind", "127.0.0.1:0", *args]
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        p = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        w = WebProc(p)
        started.append(w)

        def read() -> None:
            assert p.stderr is not None
            for line in p.stderr:
                w.lines.append(line)

        threading.Thread(target=read, daemon=True).start()

        def serving() -> str | None:
            found = SERVING.search(w.log())
            if found is None and p.poll() is not None:
                raise AssertionError(f"web exited {p.returncode}: {w.log()}")
            return found.group(1) if found else None

        w.url = wait_for(serving, timeout=20, what="the web view to listen")
        return w

    yield _start
    for w in started:
        if w.proc.poll() is None:
            w.proc.terminate()
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()


@pytest.fixture
def ledger(db):
    """Workers ocr (daily in Lisbon, its 2026-01-01 period failed all three attempts:
    an alert), thumbs (every 5 minutes, a run queued: active) and idle (unscheduled)."""
    for w in ("ocr", "thumbs", "idle"):
        make_worker(db, w)
    put_schedule(db, "ocr", "0 2 * * *", "Europe/Lisbon")
    put_schedule(db, "thumbs", "*/5 * * * *", "UTC")
    tick(db)  # arm
    previous = None
    for attempt, error in enumerate(CHAIN_ERRORS, start=1):
        [(previous,)] = db.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, attempt, retry_of,"
            " scheduled_for, not_before, started_at, finished_at, error)"
            " VALUES ('ocr', 'SCHEDULE', 'FAILED', %s, %s, '2026-01-01 02:00Z',"
            " '2026-01-01 02:00Z'::timestamptz + %s * interval '2 minutes',"
            " '2026-01-01 02:00Z'::timestamptz + %s * interval '2 minutes' + interval '5 seconds',"
            " '2026-01-01 02:00Z'::timestamptz + %s * interval '2 minutes' + interval '50 seconds', %s)"
            " RETURNING run_id",
            (attempt, previous, attempt - 1, attempt - 1, attempt - 1, error),
        ).fetchall()
    [(queued,)] = db.execute("SELECT run_id FROM scrinalia.enqueue('thumbs', '{}', 'MANUAL', 'test')").fetchall()
    return {"chain_last": previous, "queued": queued}


@pytest.fixture
def planted(db):
    make_worker(db, "ocr")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, request, updated_by,"
        " next_run_at, arm_error, arm_error_since, arm_retry_at, last_skipped_at, last_skip_reason)"
        " VALUES ('ocr', '* * * * *', 'UTC', %s, %s, now() + interval '1 hour', %s, now(),"
        " now() + interval '1 hour', now(), %s)",
        (Jsonb({"options": {"lang": HOSTILE}}), HOSTILE, HOSTILE, HOSTILE),
    )
    db.execute("UPDATE scrinalia.scheduler_state SET last_tick_by = %s, last_tick_at = now()", (HOSTILE,))
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, error, created_at, started_at,"
        " finished_at, scheduled_for) VALUES ('ocr', 'MANUAL', 'FAILED', %s, now(), now(), now(), NULL),"
        " ('ocr', 'SCHEDULE', 'FAILED', %s, now(), now(), now(), date_trunc('minute', now()))",
        (HOSTILE, HOSTILE),
    )
    return db
