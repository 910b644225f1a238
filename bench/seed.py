"""Set-based seeding: workers, due schedules, active runs and a million-row history.

All of it is plain INSERT ... SELECT as the superuser (the benchmark owns its
database), so seeding 100,000 schedules takes seconds, not the minutes that as many
put_schedule() calls would. The rows respect every CHECK of migrations/*.sql.
"""

from __future__ import annotations

import psycopg

# The expressions are templates over the minute, so that a large set has many
# distinct (expression, zone) pairs, as a real platform would, and the memoised
# next_occurrences() does real work: up to 60 x len(TEMPLATES) x len(ZONES) pairs.
TEMPLATES = (
    "{m} * * * *",
    "{m} 2 * * *",
    "{m} 6 * * 1-5",
    "{m} */4 * * *",
    "{m} 3 1 * *",
    "{m} 0 * * SUN",
    "{m} 9-17 * * MON-FRI",
    "{m} 12 1,15 * *",
    "*/15 * * * *",
    "{m} 1 * JAN-MAR,OCT-DEC *",
)
ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/Sao_Paulo",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Asia/Kolkata",
    "Europe/London",
)

DEFAULT_CONFIG = '{"engine": "tesseract", "options": {"dpi": 300, "lang": "por"}}'
ENGINES = '{"tesseract": {"engine_options": {"psm": {"type": "integer"}}}}'
OPTIONS = '{"dpi": {"type": "integer"}, "lang": {"type": "string", "values": ["por", "eng"]}}'


def worker_name(i: int) -> str:
    return f"bw{i:06d}"


def reset(c: psycopg.Connection) -> None:
    """Empties the ledger, the schedules and the catalogue (the units too)."""
    c.execute(
        "TRUNCATE scrinalia.archive_worker_runs, scrinalia.archive_worker_schedules, "
        "scrinalia.archive_worker_settings, scrinalia.archive_worker_units, "
        "scrinalia.archive_workers RESTART IDENTITY CASCADE"
    )


def workers(c: psycopg.Connection, n: int) -> None:
    """n catalogue rows bw000000.. with a small catalogue, so resolve_config does real work."""
    c.execute(
        "INSERT INTO scrinalia.archive_workers (worker_name, engines, options, default_config) "
        "SELECT format('bw%%s', lpad(i::text, 6, '0')), %s::jsonb, %s::jsonb, %s::jsonb "
        "FROM generate_series(0, %s - 1) i",
        (ENGINES, OPTIONS, DEFAULT_CONFIG, n),
    )


def schedules(c: psycopg.Connection, n: int, due: bool = True) -> None:
    """A schedule for each of the n workers, cycling through templates, minutes and zones;
    due ones have next_run_at spread over the last two hours."""
    templates = list(TEMPLATES)
    zones = list(ZONES)
    c.execute(
        """
        INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, request, next_run_at)
        SELECT format('bw%%s', lpad(i::text, 6, '0')),
               replace((%(t)s::text[])[1 + i %% cardinality(%(t)s::text[])], '{m}', ((i / 7) %% 60)::text),
               (%(z)s::text[])[1 + (i / 3) %% cardinality(%(z)s::text[])],
               CASE WHEN i %% 4 = 0 THEN '{"options": {"dpi": 600}}'::jsonb ELSE '{}'::jsonb END,
               CASE WHEN %(due)s THEN now() - make_interval(secs => 1 + (i * 7919) %% 7200) END
          FROM generate_series(0, %(n)s - 1) i
        """,
        {"t": templates, "z": zones, "n": n, "due": due},
    )


def active_runs(c: psycopg.Connection, n: int, every: int = 2) -> int:
    """A QUEUED manual run on every `every`-th worker (their tick is a skip). Returns the count."""
    cur = c.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, requested_by) "
        "SELECT format('bw%%s', lpad(i::text, 6, '0')), 'MANUAL', 'QUEUED', 'bench' "
        "FROM generate_series(0, %s - 1, %s) i",
        (n, every),
    )
    return cur.rowcount


def queued_runs(c: psycopg.Connection, n: int) -> int:
    """One QUEUED manual run per worker, for the claim benchmark."""
    return active_runs(c, n, every=1)


# One block of ten consecutive run_ids is a realistic slice of a ledger: scheduled
# successes, a FAILED -> FAILED -> SUCCEEDED chain (attempts 1, 2, 3), an INTERRUPTED
# run retried once, manual and CLI runs, a cancellation. Retries point at run_id - 1,
# hence OVERRIDING SYSTEM VALUE; their retry_pending is false (the retry exists).
HISTORY_SQL = """
INSERT INTO scrinalia.archive_worker_runs
       (run_id, worker_name, status, trigger, attempt, retry_of, scheduled_for,
        created_at, started_at, finished_at, duration, error, error_fingerprint,
        requested_by, lease_owner, config)
OVERRIDING SYSTEM VALUE
SELECT g.id,
       format('bw%%s', lpad(((g.id / 10) %% %(workers)s)::text, 6, '0')),
       k.status::scrinalia.run_status, k.trig::scrinalia.run_trigger, k.attempt,
       CASE WHEN k.attempt > 1 THEN g.id - 1 END,
       -- a retry chain shares its head's period; periods stay unique per worker
       CASE WHEN k.trig = 'SCHEDULE' THEN t.base + make_interval(secs => k.head) END,
       t.base, t.base + interval '1 second', t.base + interval '31 seconds', interval '30 seconds',
       CASE WHEN k.status IN ('FAILED', 'INTERRUPTED', 'CANCELLED') THEN 'bench history: ' || k.status END,
       CASE WHEN k.status = 'FAILED' THEN md5(k.status) END,
       'bench', CASE WHEN k.status <> 'CANCELLED' THEN 'bench-runner' END,
       %(config)s::jsonb
  FROM generate_series(%(first)s, %(first)s + %(n)s - 1) AS g(id)
 CROSS JOIN LATERAL (SELECT timestamptz '2020-01-01' + make_interval(mins => (g.id / 10)::int) AS base) t
  JOIN (VALUES (0, 'SUCCEEDED', 'SCHEDULE', 1, 0),
               (1, 'FAILED', 'SCHEDULE', 1, 1),
               (2, 'FAILED', 'SCHEDULE', 2, 1),
               (3, 'SUCCEEDED', 'SCHEDULE', 3, 1),
               (4, 'INTERRUPTED', 'SCHEDULE', 1, 4),
               (5, 'SUCCEEDED', 'SCHEDULE', 2, 4),
               (6, 'SUCCEEDED', 'MANUAL', 1, NULL),
               (7, 'FAILED', 'CLI', 1, NULL),
               (8, 'CANCELLED', 'MANUAL', 1, NULL),
               (9, 'SUCCEEDED', 'SCHEDULE', 1, 9)) AS k(slot, status, trig, attempt, head)
    ON k.slot = g.id %% 10
"""


# Each schedule's last run as the tick leaves it: its worker's newest scheduled attempt 1.
# A history seeded by hand was not enqueued by a tick, which left last_run_id NULL: a
# scrape then found no run to read per schedule, where a running ledger has one each.
LAST_RUNS_SQL = """
UPDATE scrinalia.archive_worker_schedules s SET last_run_id = l.run_id
  FROM (SELECT r.worker_name, max(r.run_id) AS run_id FROM scrinalia.archive_worker_runs r
         WHERE r.attempt = 1 AND r.scheduled_for IS NOT NULL GROUP BY r.worker_name) l
 WHERE l.worker_name = s.worker_name
"""


def last_runs(c: psycopg.Connection) -> int:
    """Points each schedule at its last run (LAST_RUNS_SQL); how many schedules have one."""
    return c.execute(LAST_RUNS_SQL).rowcount


# How much history a used ledger gets between two autovacuums, for layout "use".
HISTORY_CHUNK = 100_000


def history(c: psycopg.Connection, n: int, n_workers: int, layout: str = "use") -> int:
    """n finished runs (n a multiple of 10) spread over the workers, with run_ids below
    any live run's: the identity sequence is moved past them. c must be in autocommit.

    layout "use": the heap as a ledger's use leaves it. A run is written three times
    (the enqueue's row, then the claim's and the finish's new versions), and vacuum
    takes back the dead versions: chunk by chunk, each chunk's rows are written twice
    more and the table vacuumed, so later rows fill the space earlier ones left.
    layout "dense": each row written once, pages packed full, as a restore (COPY) or a
    rewrite (VACUUM FULL, pg_repack) leaves them."""
    if layout not in ("use", "dense"):
        raise ValueError(f"history layout {layout!r}: use or dense")
    first = c.execute("SELECT (coalesce(max(run_id), 0) / 10 + 1) * 10 FROM scrinalia.archive_worker_runs").fetchone()[
        0
    ]
    chunk = HISTORY_CHUNK if layout == "use" else n
    written = 0
    for start in range(first, first + n, chunk):
        size = min(chunk, first + n - start)
        written += c.execute(
            HISTORY_SQL, {"workers": n_workers, "first": start, "n": size, "config": DEFAULT_CONFIG}
        ).rowcount
        if layout == "use":
            for _ in range(2):  # new versions of every row, as the claim and the finish write them
                c.execute(
                    "UPDATE scrinalia.archive_worker_runs SET duration = duration WHERE run_id >= %s AND run_id < %s",
                    (start, start + size),
                )
            c.execute("VACUUM scrinalia.archive_worker_runs")
    c.execute(
        "SELECT setval(pg_get_serial_sequence('scrinalia.archive_worker_runs', 'run_id'), "
        "(SELECT max(run_id) FROM scrinalia.archive_worker_runs))"
    )
    return written
