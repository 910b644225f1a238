"""docs/operate.md's Python listener for the pushed alerts, run as written (its DSN a
reader's login): it wakes on the scheduler's NOTIFY and pages with the alert's words."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

from helpers import make_worker

ROOT = Path(__file__).resolve().parents[2]


def listener_code(dsn: str) -> str:
    section = (ROOT / "docs" / "operate.md").read_text().split("## Pushed alerts", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert 'DSN = "postgresql://archive_pager@db/archive"' in code
    return code.replace('"postgresql://archive_pager@db/archive"', repr(dsn))


def next_line(proc: subprocess.Popen, lines: queue.Queue[str]) -> str:
    try:
        return lines.get(timeout=30)
    except queue.Empty:
        proc.kill()
        raise AssertionError(f"the listener paged nothing; its stderr: {proc.communicate()[1]}") from None


def test_the_python_listener_pages_once_per_alert(db, db_dsn, role_logins):
    reader = role_logins["reader"]
    make_worker(db)
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", listener_code(psycopg.conninfo.make_conninfo(db_dsn, user=reader))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        deadline = time.monotonic() + 30
        while not db.execute(  # the listener's LISTEN done: its session idle after it
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND query = 'LISTEN scrinalia_alerts'"
            " AND state = 'idle'",
            (reader,),
        ).fetchone()[0]:
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the listener never listened"
            time.sleep(0.05)
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
        db.execute("UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '6 minutes'")
        for _ in range(3):  # three checks, as three passes would make: one page per alert
            db.execute("UPDATE scrinalia.scheduler_chores SET alerts_checked_at = NULL")
            db.execute("SELECT scrinalia.announce_alerts()")
        got = [next_line(proc, lines), next_line(proc, lines)]
        # (nobody holds the scheduler's lock: the scheduler's health is an alert too)
        assert sorted(ln.split(" ", 2)[1] for ln in got) == ["RUN_UNCLAIMED", "SCHEDULER_UNHEALTHY"]
        [unclaimed] = [ln for ln in got if "RUN_UNCLAIMED" in ln]
        assert unclaimed.startswith(f"PAGE: RUN_UNCLAIMED ocr runs [{run_id}]: run #{run_id} of ocr")
        db.execute('SELECT pg_notify(\'scrinalia_alerts\', \'{"kind": "END", "worker": null, "run_ids": null}\')')
        assert next_line(proc, lines).startswith("PAGE: END None runs None")  # and nothing before it
    finally:
        proc.kill()
        proc.wait()
