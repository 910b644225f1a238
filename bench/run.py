"""Run the benchmarks: `python -m bench [--quick] [--only KEY,...] [--dsn DSN]`.

Starts a throwaway PostgreSQL (scrinalia_workers.testkit.cluster.start_cluster()) unless
--dsn or SCRINALIA_BENCH_DSN names a server (a superuser DSN: a database is created
and dropped per benchmark), migrates, runs each benchmark, prints its table and
writes BENCHMARKS.md (a full run; a subset replaces only its own sections; --quick
writes nothing unless --output is given).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

import psycopg  # noqa: E402

from bench import machine, report  # noqa: E402
from bench.common import InvariantError, Result, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KEYS = report.ORDER
DESCRIPTIONS = {
    "tick": "1. one tick over 10,000 and 100,000 due schedules",
    "history": "2. tick and create_retries() with 1,000,000 finished runs",
    "claim": "3. claim/run/finish with 4 runners (processes, threads, durable)",
    "lateness": "4. scheduler lateness against pg_cron, and enqueue-to-claim latency (real processes)",
    "compare": "5. side by side with graphile-worker, pgqueuer and procrastinate (each tuned and at defaults)",
    "schedules": "6. schedule writes: put_schedule calls/s and put_schedules in bulk",
    "enqueue": "7. enqueue through the API: enqueue() calls/s and enqueue_runs() in bulk",
    "metrics": "8. the exporter's queries, worker_metrics() and the alerts at 2,000 and 100,000 workers",
    "peer": "9. the runner against graphile-worker tuned at 10,000 and 100,000 jobs, durability off and on",
    "scale": "10. 10,000,000 finished runs and 100,000 workers: drain, pass, enqueue, queries, prune, sizes",
}


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="The scrinalia-workers benchmarks (issue 4).",
        epilog="benchmarks: " + "; ".join(f"{k}: {v}" for k, v in DESCRIPTIONS.items()),
    )
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run of under a minute")
    p.add_argument("--only", metavar="KEY[,KEY]", help=f"run only these ({', '.join(KEYS)})")
    p.add_argument("--skip", metavar="KEY[,KEY]", help="run all but these")
    p.add_argument(
        "--dsn", help="a superuser DSN of an existing server (default: $SCRINALIA_BENCH_DSN, else a throwaway cluster)"
    )
    p.add_argument(
        "--output",
        type=Path,
        help="where to write the report (default BENCHMARKS.md; with --quick, nothing is written unless this is given)",
    )
    p.add_argument("--debug", action="store_true", help="print the traceback of a benchmark that fails")
    p.add_argument(
        "--minutes",
        type=int,
        default=10,
        metavar="N",
        help="lateness: real minute boundaries to measure (default 10; issue 12 asks >= 10)",
    )
    p.add_argument(
        "--no-durable",
        action="store_true",
        help="skip the claim, compare and peer runs with fsync/synchronous_commit on (own cluster only)",
    )
    args = p.parse_args(argv)

    def keys(text):
        got = [k.strip() for k in text.split(",") if k.strip()]
        bad = [k for k in got if k not in KEYS]
        if bad:
            p.error(f"unknown benchmark {', '.join(bad)}: choose from {', '.join(KEYS)}")
        return got

    selected = keys(args.only) if args.only else list(KEYS)
    if args.skip:
        skip = keys(args.skip)
        selected = [k for k in selected if k not in skip]
    if not selected:
        p.error("nothing to run")
    args.selected = selected
    return args


class Databases:
    """One fresh database per benchmark in the cluster, dropped at the end."""

    def __init__(self, admin_dsn: str):
        self.admin_dsn = admin_dsn
        self.made: list[str] = []

    def dsn(self, name: str) -> str:
        return psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=name)

    def fresh(self, name: str, migrate: bool = True) -> str:
        from scrinalia_workers.admin.migrate import migrate as apply

        with psycopg.connect(self.admin_dsn, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        dsn = self.dsn(name)
        if migrate:
            apply(dsn, create_groups=True)
        return dsn

    def drop_all(self) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as c:
            for name in self.made:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_one(key: str, dbs: Databases, args, own_cluster: bool) -> Result:
    if key == "tick":
        from bench import tick_bench

        return tick_bench.run(dbs.fresh("bench_tick"), quick=args.quick)
    if key == "history":
        from bench import history_bench

        return history_bench.run(lambda name: dbs.fresh(name), quick=args.quick)
    if key == "claim":
        from bench import claim_bench

        return claim_bench.run(
            dbs.fresh("bench_claim"),
            quick=args.quick,
            admin_dsn=dbs.admin_dsn,
            durable=own_cluster and not args.no_durable,
        )
    if key == "lateness":
        from bench import lateness_bench

        return lateness_bench.run(
            dbs.fresh("bench_lateness"), quick=args.quick, admin_dsn=dbs.admin_dsn, minutes=args.minutes
        )
    if key == "compare":
        from bench import compare_bench

        return compare_bench.run(
            lambda name, migrate=True: dbs.fresh(name, migrate),
            quick=args.quick,
            admin_dsn=dbs.admin_dsn,
            durable=own_cluster and not args.no_durable,
        )
    if key == "schedules":
        from bench import schedule_bench

        return schedule_bench.run(dbs.fresh("bench_schedules"), quick=args.quick)
    if key == "enqueue":
        from bench import enqueue_bench

        return enqueue_bench.run(dbs.fresh("bench_enqueue"), quick=args.quick)
    if key == "metrics":
        from bench import metrics_bench

        return metrics_bench.run(lambda name: dbs.fresh(name), quick=args.quick)
    if key == "peer":
        from bench import peer_bench

        return peer_bench.run(
            lambda name, migrate=True: dbs.fresh(name, migrate),
            quick=args.quick,
            admin_dsn=dbs.admin_dsn,
            durable=own_cluster and not args.no_durable,
        )
    if key == "scale":
        from bench import scale_bench

        return scale_bench.run(lambda name: dbs.fresh(name), quick=args.quick)
    raise ValueError(key)


def start_own_cluster(with_pgcron: bool, commit_timestamps: bool = False):
    """The throwaway cluster; with pg_cron preloaded when the lateness benchmark runs and
    the library is installed (it can only be loaded at server start), and with
    track_commit_timestamp (a restart-time setting too) for the lateness measure."""
    from bench import pgcron
    from scrinalia_workers.testkit import cluster as pgserver

    note = (
        "a throwaway cluster from scrinalia_workers.testkit.cluster "
        "(fsync=off, synchronous_commit=off, full_page_writes=off"
    )
    bin_dir = pgserver.find_bin_dir() if os.environ.get("SCRINALIA_PG") != "embedded" else None
    extra = {"track_commit_timestamp": "on"} if commit_timestamps and bin_dir else {}
    note += ", track_commit_timestamp=on" if extra else ""
    if with_pgcron and pgcron.library_installed(bin_dir):
        cluster = pgserver.LocalCluster(bin_dir, settings={**pgcron.SETTINGS, **extra}).start()
        return cluster, note + ", pg_cron preloaded with cron.database_name=postgres)"
    if with_pgcron:
        print(
            "pg_cron is not installed (apt-get install postgresql-15-cron): the lateness benchmark "
            "measures ours without its reference",
            flush=True,
        )
    if extra:
        return pgserver.LocalCluster(bin_dir, settings=extra).start(), note + ")"
    return pgserver.start_cluster(), note + ")"


def failed(key: str, message: str) -> Result:
    return Result(
        key=key,
        title=DESCRIPTIONS[key],
        setup=["(see bench/ for the setup)"],
        headers=["error"],
        rows=[[message]],
        target="-",
        met=False,
        headline="FAILED",
        notes=["The benchmark did not complete, so it has no figures."],
    )


def print_result(r: Result) -> None:
    print(f"\n== {r.title} ==")
    print(table(r.headers, r.rows))
    print(f"target: {r.target}; verdict: {r.verdict}")
    for n in r.notes:
        print(f"note: {n}")


def main(argv=None) -> int:
    args = parse_args(argv)
    from scrinalia_workers.errors import ScrinaliaError

    admin_dsn = args.dsn or os.environ.get("SCRINALIA_BENCH_DSN")
    cluster = None
    try:
        if admin_dsn:
            note = "an existing server (SCRINALIA_BENCH_DSN / --dsn), its own settings"
        else:
            print("starting a throwaway PostgreSQL cluster ...", flush=True)
            cluster, note = start_own_cluster(
                with_pgcron="lateness" in args.selected and not args.quick,
                commit_timestamps="lateness" in args.selected,
            )
            admin_dsn = cluster.dsn("postgres")
        m = machine.describe(admin_dsn, note)
        print(
            f"{m['date']}: {m['cores']} cores, {m['cpu']}, {m['memory']}; {m['server'].split(',')[0]}; "
            + ", ".join(f"{k}={v}" for k, v in m["settings"].items()),
            flush=True,
        )
        dbs = Databases(admin_dsn)
        results, ok = [], True
        try:
            for key in args.selected:
                load, started = os.getloadavg(), machine.utc_now()
                print(f"\nrunning {key}: {DESCRIPTIONS[key]} (load average {load[0]:.2f}) ...", flush=True)
                try:
                    r = run_one(key, dbs, args, own_cluster=cluster is not None)
                except InvariantError as e:
                    r = failed(key, f"invariant violated: {e}")
                except AssertionError as e:  # testkit's wait_for gave up: a process's work never came
                    r = failed(key, str(e).strip().splitlines()[0])
                except (psycopg.Error, ScrinaliaError, OSError, RuntimeError) as e:
                    if args.debug:
                        traceback.print_exc()
                    r = failed(key, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
                r.load, r.date = load, started
                ok = ok and r.headline != "FAILED"
                if args.quick and r.headline != "FAILED":
                    r.met = None  # the checks ran; the sizes are too small to judge a target
                    r.rows = [[("-" if c in ("met", "NOT met") else c) for c in row] for row in r.rows]
                    r.notes.insert(0, "--quick: smoke sizes, so no target is judged (the invariant checks did run).")
                results.append(r)
                print_result(r)
        finally:
            dbs.drop_all()
    except ScrinaliaError as e:
        print(f"bench: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted (the throwaway cluster is removed)", file=sys.stderr)
        return 130
    except psycopg.OperationalError as e:
        print(f"bench: cannot use the database: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    finally:
        if cluster is not None:
            cluster.stop()

    out = args.output or (None if args.quick else ROOT / "BENCHMARKS.md")
    if out is not None:
        from bench import figures

        # the repository's pictures belong to BENCHMARKS.md; another report gets its own folder
        fig_dir = (
            ROOT / "bench" / "figures"
            if out.resolve() == (ROOT / "BENCHMARKS.md").resolve()
            else out.resolve().parent / f"{out.stem}-figures"
        )
        for r in results:
            png = figures.draw(r, fig_dir)
            if png is not None:
                r.figure = os.path.relpath(png, out.resolve().parent)
                print(f"wrote {png}")
        existing = out.read_text() if out.exists() else None
        out.write_text(report.render(m, results, existing))
        print(f"\nwrote {out}")
    else:
        print("\n--quick: no report written (give --output FILE to write one)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
