"""The zero-setup demo: a scheduler and a runner, narrated, on a throwaway database.

    scrinalia-workers demo [--duration SECONDS] [--dsn DSN]

It shows an enqueue every minute, a natural skip (demo-ocr's run outlasts its minute,
so the next period finds it still active), a catch-up after days without a scheduler
(one run, not a replay) and a failure with its retry. To fit in about a minute it
moves two instants in the data, and says so as it happens: the database is the
clock, so moving a next_run_at or a not_before is the honest way to fast-forward.

With a database of the user's (--dsn, DATABASE_URL, PG*) it runs only when that
database is empty or holds nothing but the demo's own workers (demo_setup.py), its
runner claims only the demo's workers, and at the end (or on Ctrl-C) it pauses the
schedules it created. Without one it starts a throwaway PostgreSQL (pgserver.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.demo.handlers import WORKERS
from scrinalia_workers.demo.setup import disable, refuse_unless_demo_only, seed
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import demo as sql

MAX_SECONDS = 240.0  # the natural end comes after about a minute; this is the cap
QUIET = 10.0  # after this long without a line, say what the demo is waiting for
DEMO_WORKERS = sorted(WORKERS)


def iso(ts: datetime | None) -> str:
    """ISO 8601 in UTC with its zone: 2026-12-03T12:04:00Z."""
    if ts is None:
        return "-"
    return ts.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Demo:
    def __init__(self, dsn: str, duration: float | None, out, user_db: bool):
        self.dsn = dsn
        self.duration = duration
        self.out = out
        self.user_db = user_db
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.seen: dict[int, str] = {}
        self.hastened: set[int] = set()
        self.skips: dict[str, datetime] = {}
        self.last_said = time.monotonic()
        self._last_table: str | None = None

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write(text + "\n")
            self.out.flush()
            self.last_said = time.monotonic()

    # --- set-up ---------------------------------------------------------------------

    def setup(self, conn: psycopg.Connection) -> None:
        for name, cron, what, _ in seed(conn):
            self.say(f"schedule {name:<16} {cron:<12} {what}")
        now, period = one(conn.execute(sql.NOW_AND_MINUTE))
        quick = ["demo-thumbnails", "demo-ocr", "demo-export"]
        if (now - period).total_seconds() < 50:
            when = f"this minute's period {iso(period)} (it began {(now - period).total_seconds():.0f} s ago)"
        else:  # so close to the next minute that this one would be a catch-up: take the next
            period += timedelta(minutes=1)
            when = f"the next minute's period {iso(period)} (in {(period - now).total_seconds():.0f} s)"
        conn.execute(
            sql.ARM_AT,
            (period, quick),
        )
        self.say(
            f"demo: armed {', '.join(quick)} on {when}, so they start now rather than at the next "
            "period the scheduler would compute"
        )
        back = one(conn.execute(sql.REINDEX_THREE_DAYS_BACK))[0]
        self.say(
            f"demo: moved demo-reindex's next period to {iso(back)}, 3 days ago, as if no scheduler "
            "had run since: expect one catch-up run, not three"
        )

    def _pipe(self, proc: subprocess.Popen, label: str) -> None:
        assert proc.stderr is not None  # started with stderr=PIPE
        for line in proc.stderr:
            self.say(f"[{label}] {line.rstrip()}")

    def start(self, label: str, module: str, *args: str) -> None:
        # a session of its own: Ctrl-C reaches the demo, which stops them in order;
        # and they die with the demo even if it is killed outright (Linux)
        # the DSN (and so any password in it) goes through the environment: a command
        # line is readable by every local user in /proc/PID/cmdline
        env = dict(os.environ, DATABASE_URL=self.dsn) if self.dsn else None
        p = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.procs.append(p)
        threading.Thread(target=self._pipe, args=(p, label), daemon=True).start()
        self.say(f"started the {label} (pid {p.pid}): python -m {module} {' '.join(args)}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # --- watching -------------------------------------------------------------------

    def observe(self, conn: psycopg.Connection) -> None:
        cur = conn.cursor(row_factory=dict_row)
        for r in cur.execute(
            sql.DEMO_RUNS,
            (DEMO_WORKERS,),
        ).fetchall():
            if self.seen.get(r["run_id"]) == r["status"]:
                continue
            self.seen[r["run_id"]] = r["status"]
            extra = f" (period {iso(r['scheduled_for'])})" if r["scheduled_for"] else ""
            extra += f", retry of #{r['retry_of']}" if r["retry_of"] else ""
            if r["status"] == "FAILED":
                extra += f": {(r['error'] or '').splitlines()[0]}"
            self.say(
                f"run #{r['run_id']} {r['worker_name']} {r['trigger']} attempt "
                f"{r['attempt']}/{r['max_attempts']} is {r['status']}{extra}"
            )
            if r["retry_of"] and r["waiting"] and r["run_id"] not in self.hastened:
                self.hastened.add(r["run_id"])
                self.say(
                    f"demo: retry #{r['run_id']} waits its backoff until {iso(r['not_before'])}; "
                    "the demo moves its not_before to now to keep the demo short"
                )
                conn.execute(sql.HASTEN_RETRY, (r["run_id"],))
                conn.execute(sql.WAKE_RUNNERS)

    def observe_skips(self, conn: psycopg.Connection) -> None:
        for w, at, reason, nxt in conn.execute(
            sql.DEMO_SKIPS,
            (DEMO_WORKERS,),
        ).fetchall():
            if self.skips.get(w) != at:
                self.skips[w] = at
                self.say(
                    f"{w}: a period came at {iso(at)} while {reason}: skipped, not queued "
                    f"(one slot per worker); its next period is {iso(nxt)}"
                )

    def shown(self, conn: psycopg.Connection) -> dict[str, bool]:
        """What the demo set out to show, and whether the ledger shows it yet."""
        return one(conn.cursor(row_factory=dict_row).execute(sql.SHOWN))

    def waiting(self, conn: psycopg.Connection) -> None:
        """One line on what the demo waits for, so that a silence is never a mystery."""
        cur = conn.cursor(row_factory=dict_row)
        parts = []
        for r in cur.execute(
            sql.DEMO_ACTIVE_RUNS,
            (DEMO_WORKERS,),
        ).fetchall():
            since = f" since {iso(r['started_at'])}" if r["started_at"] else ""
            parts.append(f"run #{r['run_id']} of {r['worker_name']} is {r['status']}{since}")
        nxt = cur.execute(
            sql.DEMO_NEXT_PERIOD,
            (DEMO_WORKERS,),
        ).fetchone()
        if nxt:
            parts.insert(
                0,
                f"waiting for the {iso(nxt['next_run_at'])} period of {nxt['workers']} (in {float(nxt['secs']):.0f} s)",
            )
        self.say("... " + ("; ".join(parts) or "waiting for the scheduler"))

    def table(self, conn: psycopg.Connection) -> None:
        rows = conn.execute(
            sql.DEMO_AGENDA,
            (DEMO_WORKERS,),
        ).fetchall()
        lines = [f"  {'worker':<17}{'cron':<13}{'next run':<22}{'active':<9}last skip"]
        lines += [f"  {w:<17}{c:<13}{iso(n):<22}{a:<9}{iso(s)}" for w, c, n, a, s in rows]
        counts = conn.execute(
            sql.DEMO_RUN_COUNTS,
            (DEMO_WORKERS,),
        ).fetchall()
        lines.append("  runs: " + (", ".join(f"{s} {n}" for s, n in counts) or "none yet"))
        text = "\n".join(lines)
        if text != self._last_table:  # only when something changed
            self._last_table = text
            self.say(text)

    # --- the whole ------------------------------------------------------------------

    def run(self) -> int:
        with db.connect(self.dsn, application_name="scrinalia-workers demo") as conn:
            start = datetime.now(UTC)
            if self.duration is None:
                # demo-ocr's run must outlast the next minute: see setup()
                about = (60 if start.second < 50 else 120) - start.second + 5
                self.say(
                    "this demo runs until it has shown everything: the next minute plus a few seconds, "
                    f"about {about} s, at most until {iso(start + timedelta(seconds=MAX_SECONDS))}; "
                    "Ctrl-C stops it at any time"
                )
            else:
                self.say(
                    f"this demo runs {self.duration:g} s, until {iso(start + timedelta(seconds=self.duration))}; "
                    "Ctrl-C stops it at any time"
                )
            self.say("times are UTC, ISO 8601")
            self.setup(conn)
            try:
                self.start("scheduler", "scrinalia_workers.scheduler", "--standby-retry", "1")
                # two runners: demo-ocr's long run does not hold up the others
                for i in (1, 2):
                    self.start(
                        f"runner {i}",
                        "scrinalia_workers.runner",
                        "--handlers",
                        "scrinalia_workers.demo.handlers",
                        "--lease",
                        "10",
                        "--runner-id",
                        f"demo-runner-{i}",
                    )
                self._watch(conn)
            finally:
                self.stop()
                if self.user_db:
                    paused, cancelled = disable(conn)
                    self.say(
                        f"paused the demo's schedules ({', '.join(paused) or 'none enabled'})"
                        + (
                            f" and cancelled its queued runs ({', '.join(f'#{i}' for i in cancelled)})"
                            if cancelled
                            else ""
                        )
                        + ": this database keeps the demo's workers and history, and nothing runs on its own"
                    )
        self.say("demo finished")
        return 0

    def _watch(self, conn: psycopg.Connection) -> None:
        limit = MAX_SECONDS if self.duration is None else self.duration
        end = time.monotonic() + limit
        next_table = time.monotonic() + 5
        while time.monotonic() < end:
            self.observe(conn)
            self.observe_skips(conn)
            if time.monotonic() >= next_table:
                self.table(conn)
                next_table = time.monotonic() + 5
            if self.duration is None and all(self.shown(conn).values()):
                break
            if time.monotonic() - self.last_said >= QUIET:
                self.waiting(conn)
            time.sleep(0.3)
        self.observe(conn)
        self.observe_skips(conn)
        self.table(conn)
        missing = [k for k, v in self.shown(conn).items() if not v]
        if missing:
            self.say(f"the demo ended before it could show: {', '.join(missing)}")


def _die_with_parent() -> None:
    # SIGKILL: the demo itself was killed outright; a run its runner held is reaped
    # when its 10 s lease ends, like any crashed runner's
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stop() and the SIGTERM handler still stop them


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM tidies up like Ctrl-C


def _migrate(dsn: str, create_groups: bool) -> None:
    """Migrates; on the throwaway cluster it also creates the cluster-wide groups.

    A user's cluster gets no roles from the demo: there migrate's own one line says
    what is missing. (migrate() takes create_groups once the migrate work is merged.)
    """
    import inspect

    if "create_groups" in inspect.signature(migrate).parameters:
        migrate(dsn, create_groups=create_groups)
    else:
        migrate(dsn)


def run(duration: float | None = None, dsn: str | None = None, out=sys.stdout) -> int:
    configured = db.configured_dsn(dsn)
    user_db = configured is not None
    cluster = None
    demo = None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        if configured is not None:
            dsn = configured
            # refused before anything is written, migrations included
            with db.connect(dsn, application_name="scrinalia-workers demo") as conn:
                refuse_unless_demo_only(conn)
        else:
            from scrinalia_workers.testkit.cluster import start_cluster

            out.write("no database configured: starting a throwaway PostgreSQL\n")
            cluster = start_cluster()
            dsn = cluster.dsn("postgres")
        _migrate(dsn, create_groups=not user_db)
        demo = Demo(dsn, duration, out, user_db)
        return demo.run()
    except KeyboardInterrupt:
        out.write("interrupted (Ctrl-C or SIGTERM)\n")
        return 130
    finally:
        if cluster is not None:
            cluster.stop()
            out.write("throwaway PostgreSQL stopped\n")
