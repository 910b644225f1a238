"""The zero-setup demo: a scheduler and a runner, narrated, on a throwaway database.

    scrinalia-workers demo [--duration SECONDS] [--dsn DSN]

It shows an enqueue every minute, a skip while a slow run is active, a catch-up
after days of downtime (one run, not a replay) and a failure with its retry. To fit
in a couple of minutes it moves a few instants in the data (said so as it happens):
the database is the clock, so moving a next_run_at or a not_before is the honest
way to fast-forward. This module is also the runner's default HANDLERS module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psycopg
from psycopg.rows import dict_row

from . import db
from .migrate import migrate

SLOW_SECONDS = float(os.environ.get("SCRINALIA_DEMO_SLOW", "4"))


def _quick(run: dict) -> str:
    time.sleep(0.2)
    return "ok"


def _slow(run: dict) -> str:
    time.sleep(SLOW_SECONDS)
    return "ok"


def _flaky(run: dict) -> str:
    if run["attempt"] == 1:
        raise ConnectionError("the OCR engine was restarting (demo: attempt 1 always fails)")
    return "ok"


HANDLERS = {"thumbnails": _quick, "ocr": _slow, "reindex": _quick, "export": _flaky}

# worker -> (cron, what the demo does with it)
SCHEDULES = {
    "thumbnails": ("* * * * *", "every minute"),
    "ocr": ("*/2 * * * *", "every two minutes, a slow handler: the next period while it runs is skipped"),
    "reindex": ("0 3 * * *", "nightly at 03:00, its next run moved 3 days back: one catch-up"),
    "export": ("*/5 * * * *", "every five minutes, fails on attempt 1, then is retried"),
}


class Demo:
    def __init__(self, dsn: str, duration: float, out):
        self.dsn = dsn
        self.duration = duration
        self.out = out
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.seen: dict[int, str] = {}
        self.skip_forced = False
        self.retries_hastened: set[int] = set()
        self._last_table: str | None = None

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write(text + "\n")
            self.out.flush()

    def setup(self, conn: psycopg.Connection) -> None:
        for w, (expr, what) in SCHEDULES.items():
            conn.execute("SELECT scrinalia.register_worker(%s, p_description => %s)", (w, f"demo: {what}"))
            conn.execute("SELECT scrinalia.put_schedule(%s, %s, 'UTC', '{}'::jsonb, true, 'demo')", (w, expr))
            self.say(f"schedule {w:<10} {expr:<12} {what}")
        # due now, so the demo does not wait for the top of the minute
        conn.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = date_trunc('minute', now())"
                     " WHERE worker_name IN ('thumbnails', 'ocr', 'export')")
        conn.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = "
                     "date_trunc('day', now()) - interval '3 days' + interval '3 hours' WHERE worker_name = 'reindex'")
        self.say("demo: moved reindex's next_run_at 3 days into the past (as if the scheduler had been down)")

    def _pipe(self, proc: subprocess.Popen, label: str) -> None:
        for line in proc.stderr:
            self.say(f"[{label}] {line.rstrip()}")

    def start(self, label: str, module: str, *args: str) -> None:
        p = subprocess.Popen([sys.executable, "-m", module, "--dsn", self.dsn, *args],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        threading.Thread(target=self._pipe, args=(p, label), daemon=True).start()
        self.say(f"started {label} (pid {p.pid}): python -m {module}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def observe(self, conn: psycopg.Connection) -> None:
        cur = conn.cursor(row_factory=dict_row)
        for r in cur.execute("SELECT run_id, worker_name, status::text, trigger::text, attempt, retry_of,"
                             " not_before, not_before > now() AS waiting, error"
                             " FROM scrinalia.archive_worker_runs ORDER BY run_id").fetchall():
            if self.seen.get(r["run_id"]) == r["status"]:
                continue
            self.seen[r["run_id"]] = r["status"]
            extra = f" retry of #{r['retry_of']}" if r["retry_of"] else ""
            if r["status"] == "FAILED":
                extra += f": {(r['error'] or '').splitlines()[0]}"
            self.say(f"run #{r['run_id']} {r['worker_name']} {r['trigger']} attempt {r['attempt']}/3 "
                     f"is {r['status']}{extra}")
            if r["status"] == "RUNNING" and r["worker_name"] == "ocr" and not self.skip_forced:
                self.skip_forced = True
                conn.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = date_trunc('minute', now())"
                             " WHERE worker_name = 'ocr'")
                conn.execute("NOTIFY scrinalia_scheduler")
                self.say("demo: moved ocr's next period to now while its run is active: expect a skip")
            if r["retry_of"] and r["waiting"] and r["run_id"] not in self.retries_hastened:
                self.retries_hastened.add(r["run_id"])
                self.say(f"demo: retry #{r['run_id']} waits its backoff until {r['not_before']:%H:%M:%S} UTC; "
                         "the demo moves its not_before to now to keep the demo short")
                conn.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s",
                             (r["run_id"],))
                conn.execute("NOTIFY scrinalia_runs")

    def table(self, conn: psycopg.Connection) -> None:
        rows = conn.execute(
            "SELECT worker_name, cron, to_char(next_run_at AT TIME ZONE 'UTC', 'HH24:MI:SS'),"
            " coalesce(active_status::text, '-'), to_char(last_skipped_at AT TIME ZONE 'UTC', 'HH24:MI:SS')"
            " FROM scrinalia.worker_agenda WHERE scheduled ORDER BY worker_name").fetchall()
        lines = [f"  {'worker':<11}{'cron':<13}{'next run':<10}{'active':<9}last skip"]
        lines += [f"  {w:<11}{c:<13}{n or '-':<10}{a:<9}{s or '-'}" for w, c, n, a, s in rows]
        counts = conn.execute("SELECT status::text, count(*) FROM scrinalia.archive_worker_runs"
                              " GROUP BY 1 ORDER BY 1").fetchall()
        lines.append("  runs: " + (", ".join(f"{s} {n}" for s, n in counts) or "none yet"))
        text = "\n".join(lines)
        if text != self._last_table:  # only when something changed
            self._last_table = text
            self.say(text)

    def run(self) -> int:
        with db.connect(self.dsn, application_name="scrinalia-workers demo") as conn:
            self.setup(conn)
            self.start("scheduler", "scrinalia_workers.scheduler", "--standby-retry", "1")
            self.start("runner", "scrinalia_workers.runner", "--handlers", "scrinalia_workers.demo",
                       "--lease", "10", "--runner-id", "demo-runner")
            end = time.monotonic() + self.duration
            next_table = time.monotonic() + 5
            try:
                while time.monotonic() < end:
                    self.observe(conn)
                    if time.monotonic() >= next_table:
                        self.table(conn)
                        next_table = time.monotonic() + 5
                    time.sleep(0.3)
                self.observe(conn)
                self.table(conn)
            finally:
                self.stop()
        self.say("demo finished")
        return 0


def run(duration: float = 150.0, dsn: str | None = None, out=sys.stdout) -> int:
    duration = 150.0 if duration is None else duration
    dsn = db.configured_dsn(dsn)
    cluster = None
    try:
        if dsn is None:
            from .pgserver import start_cluster

            out.write("no database configured: starting a throwaway PostgreSQL\n")
            cluster = start_cluster()
            dsn = cluster.dsn("postgres")
        migrate(dsn)
        return Demo(dsn, duration, out).run()
    except KeyboardInterrupt:
        out.write("interrupted\n")
        return 130
    finally:
        if cluster is not None:
            cluster.stop()
            out.write("throwaway PostgreSQL stopped\n")
