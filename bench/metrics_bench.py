"""Benchmark 7: what the metrics exporter and an operator's status read, on a large ledger.

Each query of monitoring/queries.yaml (read from the file, as the exporter runs it),
worker_metrics() itself and the other readers of the same tables (current_alerts(),
scheduler_health(), what `worker list` and `status` read by default), at 2,000 and at 100,000 workers with
1,000,000 finished runs in the ledger (bench.seed.history, layout "use"). Each call
fetches every row, as the exporter and the CLI do (a command's statements in turn);
the calls are interleaved query by query.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg
import yaml

from scrinalia_workers.cli.commands import worker as worker_cmd
from scrinalia_workers.gateway.statements import cli as cli_sql
from scrinalia_workers.presentation.agenda import AGENDA_SHOWN
from scrinalia_workers.testkit.cluster import free_port
from scrinalia_workers.testkit.waiting import wait_for

from . import seed
from .common import FOLD_SQL, Result, check, conn, median, now, vacuum_analyze

QUERIES_YAML = Path(__file__).resolve().parent.parent / "monitoring" / "queries.yaml"

# (workers, target in seconds): the figures each query is held to.
TARGETS = {2_000: 0.050, 100_000: 0.5}

# A query, or the statements (with their parameters) that one command runs in turn.
Query = str | list[tuple[str, dict]]

# Read by an operator rather than scraped: measured beside the others, judged by the same target.
OTHERS: dict[str, Query] = {
    "worker_metrics()": "SELECT * FROM scrinalia.worker_metrics()",
    "current_alerts()": "SELECT * FROM scrinalia.current_alerts()",
    "scheduler_health()": "SELECT * FROM scrinalia.scheduler_health()",
    # what `worker list` reads by default: how many, and the first page by name
    "worker_catalogue": [
        (cli_sql.CATALOGUE_COUNT, {"after": ""}),
        (cli_sql.CATALOGUE_PAGE, {"after": "", "n": worker_cmd.PAGE_SIZE}),
    ],
    # what `status` reads of the agenda by default (`status --watch` the same, fewer
    # columns): the totals, and the first workers in agenda_focus()'s order
    "status: agenda": [
        (cli_sql.AGENDA_TOTALS, {}),
        (cli_sql.AGENDA_FOCUS, {"n": AGENDA_SHOWN}),
    ],
    "status: active runs": cli_sql.ACTIVE_RUNS,
    "status: latest failures": cli_sql.LATEST_FAILURES % 5,  # (its default count)
}


def exporter_queries() -> dict[str, str]:
    """The queries of monitoring/queries.yaml by their metric prefix."""
    spec = yaml.safe_load(QUERIES_YAML.read_text())
    return {name: " ".join(entry["query"].split()) for name, entry in spec.items()}


def prepare(dsn: str, n_workers: int, history_rows: int) -> dict:
    """The catalogue, a schedule per worker (due in the future, but one in a hundred
    overdue and one in a hundred paused), a QUEUED manual run on every third worker, a
    retry owed on one in fifty (its latest period still open), the history, and each
    schedule's last run as the tick leaves it (seed.last_runs)."""
    with conn(dsn) as c:
        seed.workers(c, n_workers)
        seed.schedules(c, n_workers)
        c.execute(
            "UPDATE scrinalia.archive_worker_schedules SET "
            "next_run_at = CASE WHEN worker_name ~ '00$' THEN now() - interval '1 hour' "
            "ELSE now() + interval '1 hour' END, enabled = worker_name !~ '50$'"
        )
        seed.active_runs(c, n_workers, every=3)
        inserted = seed.history(c, history_rows, n_workers)
        check(inserted == history_rows, f"history seeded {inserted} rows, expected {history_rows}")
        owed = c.execute(
            """
            INSERT INTO scrinalia.archive_worker_runs
                   (worker_name, status, trigger, attempt, scheduled_for, started_at, finished_at,
                    error, retry_pending, requested_by)
            SELECT format('bw%%s', lpad(i::text, 6, '0')), 'FAILED', 'SCHEDULE', 1,
                   timestamptz '2030-01-01' + make_interval(mins => i), now(), now(),
                   'bench: transient failure', true, 'bench'
              FROM generate_series(1, %s - 1, 50) i
            """,
            (n_workers,),
        ).rowcount
        pointed = seed.last_runs(c)
        check(pointed == n_workers, f"{pointed} of {n_workers} schedules point at their last run")
        # the seeding's deltas folded before the vacuum, as a running ledger has folded them
        # long since: folded after it, their dead pages would be read whole by every fold
        c.execute(FOLD_SQL)
    vacuum_analyze(dsn)
    return {"owed": owed}


def statements(query: Query) -> list[tuple[str, dict]]:
    return [(query, {})] if isinstance(query, str) else query


def call(c, query: Query) -> tuple[float, int]:
    """Every statement of the query in turn, every row fetched; the rows of the last."""
    t0 = now()
    for sql, params in statements(query):
        rows = c.execute(sql, params or None).fetchall()
    return now() - t0, len(rows)


def server_side(query: Query) -> Query:
    """The same statements run whole on the server, one row back each: what the rows
    cost to compute, without their transfer and their parsing by the client."""
    return [(f"SELECT count(*) FROM ({sql}) q", params) for sql, params in statements(query)]


def measure(dsn: str, queries: dict[str, Query], reps: int) -> dict[str, dict]:
    """reps calls of each query, interleaved: round by round, each query once, fetched
    whole, then once on the server alone."""
    out: dict[str, dict] = {name: {"times": [], "server": [], "rows": None} for name in queries}
    with conn(dsn, name="scrinalia-bench-metrics") as c:
        for sql in queries.values():  # one untimed call each: the plans and the cache warm
            call(c, sql)
        for _ in range(reps):
            for name, sql in queries.items():
                elapsed, n = call(c, sql)
                out[name]["times"].append(elapsed)
                out[name]["rows"] = n
                out[name]["server"].append(call(c, server_side(sql))[0])
    return out


def exporter_scrapes(dsn: str, reps: int) -> dict | None:
    """What a Prometheus server waits for: reps scrapes of the real
    prometheus-postgres-exporter running queries.yaml (the queries, then the exporter
    turning every row into series and the text over HTTP). None when it is not installed."""
    exe = shutil.which("prometheus-postgres-exporter")
    if exe is None:
        return None
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    auth = urllib.parse.quote(str(info.get("user", "postgres")))
    if info.get("password"):
        auth += ":" + urllib.parse.quote(str(info["password"]))
    url = (
        f"postgresql://{auth}@{info.get('host', '127.0.0.1')}:{info.get('port', 5432)}/{info['dbname']}?sslmode=disable"
    )
    port = free_port()
    p = subprocess.Popen(
        [
            exe,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--extend.query-path={QUERIES_YAML}",
            "--disable-default-metrics",
            "--disable-settings-metrics",
            "--log.level=warn",
        ],
        env={"DATA_SOURCE_NAME": url, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}/metrics"

    def scrape() -> str:
        with urllib.request.urlopen(endpoint, timeout=300) as r:
            return r.read().decode()

    def up() -> bool:
        try:
            scrape()  # (the untimed first scrape)
            return True
        except OSError:
            return False

    try:
        wait_for(up, timeout=120, what="prometheus-postgres-exporter answering")
        times, series = [], 0
        for _ in range(reps):
            t0 = now()
            body = scrape()
            times.append(now() - t0)
            series = sum(1 for line in body.splitlines() if line.startswith("scrinalia_"))
        return {"times": times, "series": series}
    finally:
        p.terminate()
        p.wait(timeout=30)


def verify(dsn: str, n_workers: int, owed: int, figures: dict[str, dict]) -> None:
    """The answers are the ones the seeded ledger holds: one metrics row per worker, a
    latest finished period for every scheduled worker (owed ones from before their
    open period), an overdue alert per overdue schedule."""
    check(figures["scrinalia_worker"]["rows"] == n_workers, "worker_metrics() lost or added a worker")
    page = min(worker_cmd.PAGE_SIZE, n_workers)
    check(figures["worker_catalogue"]["rows"] == page, "the catalogue's first page lost or added a worker")
    check(figures["status: agenda"]["rows"] == min(AGENDA_SHOWN, n_workers), "the agenda lost a row")
    with conn(dsn) as c:
        listed = c.execute(cli_sql.CATALOGUE_COUNT, {"after": ""}).fetchone()[0]
        check(listed == n_workers, f"the catalogue counts {listed} workers of {n_workers}")
        # the agenda's first rows: the overdue (1 in 100, worker_name ~ '00$'), then the owed retries
        first = c.execute(cli_sql.AGENDA_FOCUS, {"n": AGENDA_SHOWN}).fetchall()
        check(first[0][-1] == "overdue", f"the agenda starts with {first[0][-1]!r}, not the overdue")
        periods, newest = c.execute(
            "SELECT count(*), count(*) FILTER (WHERE scheduled_for >= '2030-01-01') "
            "FROM scrinalia.latest_finished_periods()"
        ).fetchone()
        runs = c.execute("SELECT sum(runs) FROM scrinalia.run_counts()").fetchone()[0]
        total = c.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0]
        overdue = c.execute(
            "SELECT count(*) FROM scrinalia.current_alerts() WHERE kind = 'SCHEDULE_OVERDUE'"
        ).fetchone()
    check(periods == n_workers, f"latest_finished_periods() has {periods} rows for {n_workers} scheduled workers")
    check(newest == 0, f"{newest} still-open periods reported as finished")
    check(runs == total, f"run_counts() counts {runs} runs of {total}")
    expected_overdue = sum(1 for i in range(n_workers) if i % 100 == 0)
    check(overdue[0] == expected_overdue, f"{overdue[0]} overdue alerts, expected {expected_overdue}")
    check(owed > 0, "no retry owed: the open-period path went unmeasured")


def run(dsn_for, quick: bool = False) -> Result:
    """dsn_for(name) -> the DSN of a fresh migrated database of that name."""
    sizes = [(200, 20_000), (2_000, 20_000)] if quick else [(2_000, 1_000_000), (100_000, 1_000_000)]
    reps = 5 if quick else 7
    queries = {**exporter_queries(), **OTHERS}
    rows, met, data = [], True, {}
    for n_workers, history_rows in sizes:
        dsn = dsn_for(f"bench_metrics_{n_workers}")
        t0 = now()
        prep = prepare(dsn, n_workers, history_rows)
        seeded = now() - t0
        figures = measure(dsn, queries, reps)
        verify(dsn, n_workers, prep["owed"], figures)
        scrapes = exporter_scrapes(dsn, 3)
        target = TARGETS.get(n_workers, TARGETS[2_000])
        for name, f in figures.items():
            med = median(f["times"])
            ok = med <= target
            met = met and ok
            rows.append(
                [
                    f"{n_workers:,}",
                    name,
                    f"{f['rows']:,}",
                    f"{med * 1000:.1f} ms",
                    f"{min(f['times']) * 1000:.1f}-{max(f['times']) * 1000:.1f} ms",
                    f"{median(f['server']) * 1000:.1f} ms",
                    f"<= {target * 1000:.0f} ms",
                    "met" if ok else "NOT met",
                ]
            )
        data[n_workers] = {
            "history": history_rows,
            "seeded": seeded,
            "owed": prep["owed"],
            "figures": figures,
            "scrapes": scrapes,
        }
    worst = {n: max(median(f["times"]) for f in d["figures"].values()) for n, d in data.items()}
    return Result(
        key="metrics",
        title="8. Metrics and alerts on a large ledger",
        setup=[
            "Each query of monitoring/queries.yaml as prometheus-postgres-exporter runs it, and "
            + ", ".join(OTHERS)
            + f", at {' and '.join(f'{n:,}' for n, _ in sizes)} workers, each with a schedule (1% overdue, "
            "1% paused), a QUEUED manual run on every third worker, a retry owed on one in fifty, "
            f"{sizes[0][1]:,} finished runs (bench.seed.history, layout use: retries, FAILED, INTERRUPTED, "
            "CANCELLED, manual and CLI runs), and each schedule's last_run_id on its newest scheduled attempt, as "
            "the tick leaves it (bench.seed.last_runs); the metrics' tallies folded and the database vacuumed after the "
            "seeding (its deltas, one per run, are no backlog a running ledger has).",
            f"worker_catalogue and status: agenda are what `worker list` and `status` read by default: "
            f"the catalogue's count and its first page of {worker_cmd.PAGE_SIZE} by name; the agenda's totals "
            f"and its first {AGENDA_SHOWN} workers (agenda_focus()), each joined to its "
            "worker_agenda row. Each statement of a command in turn; rows: the last one's.",
            f"Median and range of {reps} calls each after one untimed call, every row fetched by psycopg, "
            "the queries interleaved round by round on one connection; the verdict is on these. Beside "
            "them, each query run whole on the server with one row back (SELECT count(*) FROM (query)): "
            "what the rows cost without their transfer and psycopg's parsing of them.",
            "The whole scrape by the real prometheus-postgres-exporter (every query of queries.yaml, the "
            "exporter's conversion of each row into series, the text over HTTP), median of 3 after an "
            "untimed one: "
            + (
                "; ".join(
                    f"{n:,} workers {median(d['scrapes']['times']) * 1000:.0f} ms ({d['scrapes']['series']:,} series)"
                    for n, d in data.items()
                )
                if all(d["scrapes"] for d in data.values())
                else "not measured (prometheus-postgres-exporter is not installed)"
            )
            + ". Not held to the per-query target: beyond a few hundred thousand series the exporter's "
            "own work is most of it.",
        ],
        headers=["workers", "query", "rows", "median", "range", "on the server (median)", "target", "verdict"],
        rows=rows,
        target="every query within 50 ms at 2,000 workers and 0.5 s at 100,000, with 1,000,000 finished runs",
        met=met,
        headline="slowest query: " + ", ".join(f"{worst[n] * 1000:.0f} ms at {n:,} workers" for n in worst),
        data=data,
    )
