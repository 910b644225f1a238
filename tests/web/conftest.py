"""The web view's fixtures: a ledger with a few workers, a failed chain, an alert and an
active run; the real `scrinalia-workers web` process on a free loopback port, as a
given login; and HTTP through urllib (no redirect followed, errors returned as answers)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from urllib.parse import urlencode

import psycopg
import pytest

from helpers import make_worker, put_schedule, tick
from scrinalia_workers.testkit.waiting import wait_for

SERVING = re.compile(r"serving (http://\S+/)")


@dataclass
class Answer:
    status: int
    headers: Message
    body: str


@dataclass
class WebProc:
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    url: str = ""

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return request(self.url.rstrip("/") + path, headers=headers)

    def post(self, fields: dict[str, str], headers: dict[str, str] | None = None) -> Answer:
        origin = self.url.rstrip("/")
        hdrs = {"Origin": origin, "Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        return request(origin + "/action", urlencode(fields).encode(), {k: v for k, v in hdrs.items() if v})

    def log(self) -> str:
        return "".join(self.lines)


def request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return Answer(r.status, r.headers, r.read().decode())
    except urllib.error.HTTPError as e:
        return Answer(e.code, e.headers, e.read().decode())


def login_dsn(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


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


CHAIN_ERRORS = ("OCR engine crashed: page 3", "OCR engine crashed: page 3 again", "gave up: disk full")


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
