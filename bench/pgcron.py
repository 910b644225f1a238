"""pg_cron as the lateness reference: is it there, and 200 jobs that NOTIFY when they run.

pg_cron needs shared_preload_libraries=pg_cron and cron.database_name at server start,
so the throwaway cluster is started with SETTINGS when the library is installed
(Debian: apt-get install postgresql-15-cron). Its metadata lives in cron.database_name
(here `postgres`); the jobs run in the benchmark's own database through
cron.schedule_in_database(), so that one LISTENing connection there hears both systems.
Every function answers "not available, because ..." rather than raising when pg_cron
is missing: the bench then measures ours alone and says so.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from .common import conn

CHANNEL = "pgcron_bench"
JOB_PREFIX = "scrinalia-bench-"
# Each job run also writes a row here, in the benchmark's database: its commit timestamp
# (track_commit_timestamp) is when the run became visible, timed as ours are.
TABLE = "pgcron_bench_runs"
SETTINGS = {"shared_preload_libraries": "'pg_cron'", "cron.database_name": "'postgres'"}
REPORTED = ("cron.max_running_jobs", "cron.use_background_workers", "cron.log_run", "cron.host")


def library_installed(bin_dir: Path | None) -> bool:
    """pg_cron.so next to the server binaries (Debian's /usr/lib/postgresql/N/lib)."""
    return bin_dir is not None and (Path(bin_dir).parent / "lib" / "pg_cron.so").exists()


def _cron_dsn(admin_dsn: str) -> tuple[str | None, str]:
    """The DSN of cron.database_name, or None and why pg_cron cannot be used."""
    with conn(admin_dsn) as c:
        preload = c.execute("SELECT current_setting('shared_preload_libraries')").fetchone()[0]
        if "pg_cron" not in [x.strip() for x in preload.split(",")]:
            return None, (
                "pg_cron is not in shared_preload_libraries (install postgresql-15-cron; "
                "the bench's own cluster preloads it when the library is there)"
            )
        db = c.execute("SELECT current_setting('cron.database_name', true)").fetchone()[0] or "postgres"
    return psycopg.conninfo.make_conninfo(admin_dsn, dbname=db), db


def job_command(i: int) -> str:
    """Job i: one row for its minute, and a NOTIFY, in one transaction."""
    return (
        f"INSERT INTO public.{TABLE} (job, scheduled_for) VALUES ({i}, date_trunc('minute', now())); "
        f"SELECT pg_notify('{CHANNEL}', '{i}')"
    )


def setup(admin_dsn: str, bench_db: str, n: int, wait=None) -> dict:
    """Creates the extension and n jobs `* * * * *` that each write a row to TABLE and
    NOTIFY CHANNEL with their number in bench_db. Returns {"available": False, "why": ...}
    or the settings used."""
    cron_dsn, why = _cron_dsn(admin_dsn)
    if cron_dsn is None:
        return {"available": False, "why": why}
    try:
        with conn(psycopg.conninfo.make_conninfo(admin_dsn, dbname=bench_db)) as b:
            b.execute(
                f"CREATE TABLE IF NOT EXISTS public.{TABLE} (job integer NOT NULL, scheduled_for timestamptz NOT NULL)"
            )
        with conn(cron_dsn) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
            version = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'").fetchone()[0]
            settings = {s: c.execute("SELECT current_setting(%s, true)", (s,)).fetchone()[0] for s in REPORTED}
            c.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s", (JOB_PREFIX + "%",))
            for i in range(n):
                c.execute(
                    "SELECT cron.schedule_in_database(%s, '* * * * *', %s, %s)",
                    (f"{JOB_PREFIX}{i}", job_command(i), bench_db),
                )
            if wait is not None:  # the launcher is a background worker: it may still be starting
                wait(
                    lambda: c.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_cron launcher'"
                    ).fetchone()[0],
                    timeout=30,
                    what="the pg_cron launcher running",
                )
    except psycopg.Error as e:
        return {"available": False, "why": f"pg_cron could not be set up: {' '.join(str(e).split())}"}
    return {"available": True, "version": version, "database": why, "settings": settings}


def teardown(admin_dsn: str) -> None:
    cron_dsn, _ = _cron_dsn(admin_dsn)
    if cron_dsn is None:
        return
    with conn(cron_dsn) as c:
        c.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s", (JOB_PREFIX + "%",))


def run_details(admin_dsn: str, since_epoch: float) -> list[dict]:
    """pg_cron's own record of the bench jobs since an instant: start and end per run."""
    cron_dsn, _ = _cron_dsn(admin_dsn)
    if cron_dsn is None:
        return []
    with conn(cron_dsn) as c:
        cur = c.cursor(row_factory=dict_row)
        return cur.execute(
            "SELECT d.status, extract(epoch FROM d.start_time)::float8 AS start, "
            "extract(epoch FROM d.end_time)::float8 AS end "
            "FROM cron.job_run_details d "  # by command, not cron.job: unscheduled jobs leave their details
            "WHERE d.command LIKE %s AND d.start_time >= to_timestamp(%s)",
            (f"INSERT INTO public.{TABLE} %", since_epoch),
        ).fetchall()
