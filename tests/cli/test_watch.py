"""Issue 14: the live status screen and the per-worker timeline, as an operator reads them."""

from __future__ import annotations

import io

import pytest

from helpers import claim, finish, make_worker, put_schedule, set_next_run, tick
from scrinalia_workers.cli import watch


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


def test_watch_refreshes_in_place_and_stops_cleanly(busy, db_dsn, role_logins):
    import psycopg

    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    frames = []

    class Screen(io.StringIO):
        def write(self, s):
            frames.append(s)
            if len(frames) == 3:
                raise KeyboardInterrupt  # as Ctrl-C does, between two refreshes
            return len(s)

    code = watch.watch(lambda: psycopg.connect(dsn, autocommit=True), 0.05, out=Screen(), width=80)
    assert code == 0
    screens = [f for f in frames if f.startswith(watch.CLEAR)]
    assert frames[-1] == "\n"  # the screen is left with the cursor on a new line
    assert len(screens) == 3 and all("AGENDA" in s for s in screens)


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


def test_status_watch_in_a_real_terminal_fits_80_columns_and_quits_on_ctrl_c(busy, db_dsn, role_logins):
    """`scrinalia-workers status --watch` under a pseudo-terminal of 80 columns, as an
    operator runs it; Ctrl-C (SIGINT) ends it with exit 0 and no traceback."""
    import os
    import pty
    import select
    import signal
    import subprocess
    import sys
    import time

    import psycopg

    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    main, child = pty.openpty()
    env = dict(os.environ, COLUMNS="80", LINES="40")
    p = subprocess.Popen(
        [sys.executable, "-m", "scrinalia_workers.cli", "status", "--watch", "--interval", "0.3", "--dsn", dsn],
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        start_new_session=True,
    )
    os.close(child)
    out = b""
    deadline = time.monotonic() + 20
    try:
        while out.count(watch.CLEAR.encode()) < 2 and time.monotonic() < deadline:
            if select.select([main], [], [], 0.5)[0]:
                out += os.read(main, 65536)
        assert out.count(watch.CLEAR.encode()) >= 2, out[-2000:]
        os.killpg(p.pid, signal.SIGINT)
        assert p.wait(10) == 0
        while select.select([main], [], [], 0.2)[0]:
            try:
                out += os.read(main, 65536)
            except OSError:
                break
    finally:
        if p.poll() is None:
            p.kill()
        os.close(main)
    text = out.decode()
    last = text.rsplit(watch.CLEAR, 1)[1]
    assert "AGENDA" in last and "ACTIVE RUNS" in last and "Traceback" not in text
    assert all(len(line.rstrip("\r")) <= 80 for line in last.splitlines())


def test_runs_timeline_from_the_cli(busy, db_dsn, role_logins):
    import subprocess
    import sys

    import psycopg

    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.cli", "runs", "ocr", "--timeline", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ocr: the last") and "1/3" in r.stdout and "backoff" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.cli", "runs", "--timeline", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "needs a WORKER" in r.stderr
