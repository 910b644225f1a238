"""The live status screen and the per-worker timeline, as an operator reads them."""

from __future__ import annotations

import io
import os
import pty
import select
import signal
import sys

import psycopg
import pytest

from helpers import assert_one_line_error, claim, cli, finish, make_worker, put_schedule, set_next_run, tick
from scrinalia_workers.cli import watch
from scrinalia_workers.testkit.clock import FakeClock
from scrinalia_workers.testkit.waiting import wait_for


@pytest.fixture
def busy(db):
    for w in ("ocr", "thumbnails", "idle"):
        make_worker(db, w)
    put_schedule(db, "ocr", "0 2 * * *", "UTC")
    put_schedule(db, "thumbnails", "*/5 * * * *", "Europe/Berlin")
    tick(db)
    set_next_run(db, "ocr", "1 minute")
    tick(db, only=["ocr"])
    for _ in range(2):
        run_id, token, *_ = claim(db, workers=["ocr"])
        finish(db, run_id, token, "FAILED", "ConnectionError: the OCR engine was restarting\n  File x")
        db.execute("SELECT * FROM scrinalia.create_retries()")
        db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE retry_of = %s", (run_id,))
    db.execute("SELECT * FROM scrinalia.claim_next('runner-a', '30 seconds', ARRAY['ocr'])")
    return db


def test_the_screen_fits_80_columns_and_says_what_matters(busy, connect_as):
    screen = watch.render(connect_as("reader"), width=80)
    lines = screen.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert lines[1].startswith("scheduler: NOT HEALTHY: no scheduler holds the lock")
    agenda = screen.split("AGENDA", 1)[1].split("ACTIVE RUNS", 1)[0]
    assert "thumbnails" in agenda and "*/5 * * * * Europe/Berlin" in agenda
    assert "idle" in agenda and "unscheduled" in agenda
    active = screen.split("ACTIVE RUNS", 1)[1].split("LATEST FAILURES", 1)[0]
    assert "RUNNING" in active and "3/3" in active and "runner-a, lease" in active
    failures = screen.split("LATEST FAILURES", 1)[1]
    assert failures.count("FAILED") == 2 and "ConnectionError: the OCR engine" in failures


class Screen(io.StringIO):
    """A terminal that records what watch() writes and presses Ctrl-C at its `frames`-th
    write, between two refreshes, as an operator does."""

    def __init__(self, frames: int):
        super().__init__()
        self.frames: list[str] = []
        self.quit_at = frames

    def write(self, s):
        self.frames.append(s)
        if len(self.frames) == self.quit_at:
            raise KeyboardInterrupt
        return len(s)


def test_watch_refreshes_in_place_and_stops_cleanly(busy, db_dsn, role_logins):
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    clock, screen = FakeClock(), Screen(frames=3)
    code = watch.watch(lambda: psycopg.connect(dsn, autocommit=True), 2.0, out=screen, width=80, clock=clock)
    assert code == 0
    screens = [f for f in screen.frames if f.startswith(watch.CLEAR)]
    assert screen.frames[-1] == "\n"  # the screen is left with the cursor on a new line
    assert len(screens) == 3 and all("AGENDA" in s for s in screens)
    assert clock.slept == [2.0, 2.0]  # one interval between two screens


def test_watch_shows_a_lost_database_and_reconnects_with_backoff(busy, db_dsn, role_logins):
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    attempts = []

    def connect():
        attempts.append(1)
        if len(attempts) <= 2:  # the database is away for two refreshes
            raise psycopg.OperationalError("connection refused")
        return psycopg.connect(dsn, autocommit=True)

    clock, screen = FakeClock(), Screen(frames=3)
    assert watch.watch(connect, 2.0, out=screen, width=80, clock=clock) == 0
    first, second, third = (f for f in screen.frames if f.startswith(watch.CLEAR))
    assert "database unavailable (connection refused); retrying in" in first and "AGENDA" not in first
    assert "database unavailable" in second and "AGENDA" in third
    # the backoff doubles from half a second (+-25% jitter), then the interval resumes
    assert 0.375 <= clock.slept[0] <= 0.625 and 0.75 <= clock.slept[1] <= 1.25, clock.slept
    assert len(clock.slept) == 2 and len(attempts) == 3


def test_the_timeline_shows_each_attempt_with_its_outcome_and_backoff(busy):
    text = watch.timeline(busy, "ocr", width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    period = [line for line in text.splitlines() if line.startswith("period ")]
    assert len(period) == 1 and period[0].endswith("Z")
    attempts = [line.strip() for line in text.splitlines() if line.strip().startswith(("1/3", "2/3", "3/3"))]
    assert [a.split()[0] for a in attempts] == ["1/3", "2/3", "3/3"]
    assert "FAILED" in attempts[0] and "after the period" in attempts[0]
    assert "backoff" in attempts[1] and "RUNNING" in attempts[2]
    assert watch.timeline(busy, "idle") == "idle: no scheduled runs yet"


@pytest.mark.parametrize(
    "seconds, text", [(5, "5s"), (125, "2m05s"), (7300, "2h01m"), (90000, "1d01h"), (-12, "overdue 12s")]
)
def test_spans_read_at_a_glance(seconds, text):
    assert watch.span(seconds) == text


def test_status_watch_in_a_real_terminal_fits_80_columns_and_quits_on_ctrl_c(busy, db_dsn, role_logins, procs):
    """`scrinalia-workers status --watch` under a pseudo-terminal of 80 columns, as an
    operator runs it; Ctrl-C (SIGINT) ends it with exit 0 and no traceback."""
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    main, child = pty.openpty()
    env = dict(os.environ, COLUMNS="80", LINES="40")
    argv = [sys.executable, "-m", "scrinalia_workers.cli", "status", "--watch", "--interval", "0.3", "--dsn", dsn]
    p = procs.start(argv, env, terminal=child, new_session=True)
    os.close(child)
    out = bytearray()

    def read() -> bytearray:
        """What the terminal has shown so far (the child's end closes when it exits)."""
        while select.select([main], [], [], 0)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            out.extend(chunk)
        return out

    def exited() -> bool:
        read()  # the terminal kept drained while the CLI quits
        return p.popen.poll() is not None

    try:
        wait_for(lambda: read().count(watch.CLEAR.encode()) >= 2, timeout=30, what="two screens")
        os.killpg(p.pid, signal.SIGINT)
        wait_for(exited, timeout=30, what="exit on Ctrl-C")
        read()
    finally:
        os.close(main)
    assert p.popen.returncode == 0
    text = out.decode()
    last = text.rsplit(watch.CLEAR, 1)[1]
    assert "AGENDA" in last and "ACTIVE RUNS" in last and "Traceback" not in text
    assert all(len(line.rstrip("\r")) <= 80 for line in last.splitlines())


def test_runs_timeline_from_the_cli(busy, db_dsn, role_logins):
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    r = cli("runs", "ocr", "--timeline", dsn=dsn)
    assert r.code == 0, r.err
    assert r.out.startswith("ocr: the last") and "1/3" in r.out and "backoff" in r.out
    assert_one_line_error(cli("runs", "--timeline", dsn=dsn), 1, "needs a WORKER")


def test_the_timeline_and_the_runs_table_show_a_catch_up(db, db_dsn):
    """The period whose run the tick stored as a catch-up says so; an on-time one does not."""
    make_worker(db, "nightly")
    put_schedule(db, "nightly", "0 2 * * *", "UTC")
    tick(db)
    set_next_run(db, "nightly", "3 days")  # three nights missed: one run
    tick(db)
    db.execute("UPDATE scrinalia.archive_worker_runs SET status = 'CANCELLED', finished_at = now()")
    set_next_run(db, "nightly", "10 seconds")  # just due: not a catch-up
    tick(db)
    periods = [line for line in watch.timeline(db, "nightly").splitlines() if line.startswith("period ")]
    assert len(periods) == 2
    assert "catch-up" not in periods[0] and "catch-up: one run for the periods missed" in periods[1]
    table = cli("runs", "nightly", dsn=db_dsn).out.splitlines()
    assert sum("SCHEDULE catch-up" in line for line in table) == 1
