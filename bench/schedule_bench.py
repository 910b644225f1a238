"""Benchmark: schedule writes, one put_schedule() call at a time and put_schedules() in bulk.

put_schedule: N calls from one connection, each its own transaction (autocommit), the
way an API or `scrinalia-workers schedule set` saves a schedule: first N new schedules
(an empty table), then N updates of the same (a new cron, so next_run_at is cleared).
put_schedules: one call writing N schedules (all new, then all replaced), the JSON
array sent as one parameter. Both are timed by the client, from the first statement
sent to the last result read, on a connection opened beforehand; rates are schedules/s.

Self-checking: after every round the table holds exactly the schedules written (count,
and every row equal to the spec it was written from: normalised cron, zone or the
default, request, enabled), the bulk call reports the created/replaced split it should,
and the bulk rows equal the rows the single calls wrote for the same specs.
"""

from __future__ import annotations

import json

import psycopg
from psycopg.types.json import Jsonb

from . import seed
from .common import Result, check, conn, median, now, vacuum_analyze

PUT_SQL = "SELECT * FROM scrinalia.put_schedule(%s, %s, %s, %s, %s, 'bench')"
BULK_SQL = "SELECT created, replaced FROM scrinalia.put_schedules(%s::jsonb, 'bench')"
ROW_SQL = (
    "SELECT worker_name, cron, timezone, request, enabled, updated_by, next_run_at "
    "FROM scrinalia.archive_worker_schedules ORDER BY worker_name"
)
DEFAULT_ZONE = "UTC"  # the DEFAULT_TIMEZONE of a fresh database


def spec(i: int, variant: int = 0) -> dict:
    """The schedule of worker i: seed's cron templates x minutes x zones (variant shifts the
    minute, so an update changes the cron); every 5th spelt with extra blanks (the stored
    cron is normalised), every 8th without a zone (the default), every 4th with a request."""
    cron = seed.TEMPLATES[i % len(seed.TEMPLATES)].replace("{m}", str((i // 7 + variant) % 60))
    if i % 5 == 0:
        cron = cron.replace(" ", "  ")
    s = {"worker_name": seed.worker_name(i), "cron": cron}
    if i % 8 != 7:
        s["timezone"] = seed.ZONES[(i // 3) % len(seed.ZONES)]
    if i % 4 == 0:
        s["request"] = {"options": {"dpi": 600}}
    return s


def distinct_cron(i: int) -> str:
    """A cron no other worker of the first 40,320 has (minute, hour, day of month): the
    worst case for put_schedules, which validates each distinct cron's fields."""
    return f"{i % 60} {(i // 60) % 24} {1 + (i // 1440) % 28} * *"


def expected(specs: list[dict]) -> list[tuple]:
    return sorted(
        (
            s["worker_name"],
            " ".join(s["cron"].split()),
            s.get("timezone", DEFAULT_ZONE),
            s.get("request", {}),
            s.get("enabled", True),
            "bench",
        )
        for s in specs
    )


def stored(c: psycopg.Connection) -> list[tuple]:
    """The schedules as written (next_run_at left out: it must be NULL, checked here)."""
    rows = c.execute(ROW_SQL).fetchall()
    armed = sum(1 for r in rows if r[6] is not None)
    check(armed == 0, f"{armed} schedules have a next_run_at after a write that changes the cron")
    return [tuple(r[:6]) for r in rows]


def verify(c: psycopg.Connection, specs: list[dict], what: str) -> list[tuple]:
    rows = stored(c)
    check(len(rows) == len(specs), f"{what}: {len(rows)} schedules stored, {len(specs)} written")
    check(rows == expected(specs), f"{what}: the stored schedules differ from those written")
    return rows


def empty(c: psycopg.Connection) -> None:
    c.execute("TRUNCATE scrinalia.archive_worker_schedules")


def singles(c: psycopg.Connection, specs: list[dict]) -> float:
    """One put_schedule() call per spec, each its own transaction; returns the seconds."""
    args = [
        (s["worker_name"], s["cron"], s.get("timezone"), Jsonb(s.get("request", {})), s.get("enabled", True))
        for s in specs
    ]
    t0 = now()
    for a in args:
        c.execute(PUT_SQL, a).fetchall()
    return now() - t0


def bulk(c: psycopg.Connection, specs: list[dict]) -> tuple[float, tuple[int, int]]:
    """One put_schedules() call for all specs; returns the seconds and (created, replaced)."""
    payload = json.dumps(specs)  # serialised before the clock starts, as a client holds its file
    t0 = now()
    got = c.execute(BULK_SQL, (payload,)).fetchone()
    return now() - t0, (got[0], got[1])


def measure_singles(c: psycopg.Connection, n: int, reps: int) -> dict:
    new, upd = [], []
    specs = [spec(i) for i in range(n)]
    changed = [spec(i, variant=1) for i in range(n)]
    for _ in range(reps):
        empty(c)
        c.execute("SELECT 1")
        new.append(n / singles(c, specs))
        reference = verify(c, specs, "put_schedule, new")
        upd.append(n / singles(c, changed))
        verify(c, changed, "put_schedule, updates")
    return {"n": n, "new": new, "update": upd, "reference": reference}


def measure_bulk(
    c: psycopg.Connection, n: int, reps: int, reference: list[tuple] | None, all_distinct: bool = False
) -> dict:
    new, upd = [], []
    specs = [spec(i) for i in range(n)]
    changed = [spec(i, variant=1) for i in range(n)]
    if all_distinct:
        specs = [dict(s, cron=distinct_cron(i)) for i, s in enumerate(specs)]
        changed = [dict(s, cron=distinct_cron(i + 1)) for i, s in enumerate(changed)]
        reference = None
    distinct = len({" ".join(s["cron"].split()) for s in specs})
    for _ in range(reps):
        empty(c)
        vacuum_analyze_one(c)
        seconds, split = bulk(c, specs)
        check(split == (n, 0), f"put_schedules of {n} new schedules reported {split}")
        rows = verify(c, specs, f"put_schedules({n:,}), new")
        if reference is not None:
            # the bulk form writes what as many put_schedule() calls write
            check(rows[: len(reference)] == reference, "put_schedules wrote other rows than put_schedule")
        new.append(n / seconds)
        seconds, split = bulk(c, changed)
        check(split == (0, n), f"put_schedules replacing {n} schedules reported {split}")
        verify(c, changed, f"put_schedules({n:,}), replaced")
        upd.append(n / seconds)
    return {"n": n, "new": new, "update": upd, "distinct_crons": distinct, "all_distinct": all_distinct}


def vacuum_analyze_one(c: psycopg.Connection) -> None:
    c.execute("VACUUM ANALYZE scrinalia.archive_worker_schedules")


def scan_cost(c: psycopg.Connection, reps: int = 20) -> float:
    """Seconds per call of the pg_timezone_names scan validate_timezone made every time
    before issue 12 (and still makes for a name it did not list at install)."""
    t0 = now()
    for _ in range(reps):
        c.execute("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = 'Europe/Berlin')").fetchone()
    return (now() - t0) / reps


def rate(values: list[float]) -> str:
    return f"{median(values):,.0f}"


def spread(values: list[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}"


def run(dsn: str, quick: bool = False) -> Result:
    n_single = 300 if quick else 5_000
    bulk_sizes = [1_000, 5_000] if quick else [10_000, 100_000]
    reps = 3
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, max(bulk_sizes + [n_single]))
    vacuum_analyze(dsn, "scrinalia.archive_workers")
    with conn(dsn) as c:
        scan = scan_cost(c)
        single = measure_singles(c, n_single, reps)
        bulks = [measure_bulk(c, n, reps, single["reference"] if n >= n_single else None) for n in bulk_sizes]
        bulks.append(measure_bulk(c, bulk_sizes[0], reps, None, all_distinct=True))
        empty(c)

    single_target, bulk_target = 1_000, 20_000
    rows, met = [], True
    for mode in ("new", "update"):
        ok = median(single[mode]) >= single_target
        met = met and ok
        rows.append(
            [
                f"put_schedule, {single['n']:,} calls ({'new' if mode == 'new' else 'updates'})",
                rate(single[mode]),
                spread(single[mode]),
                f"{1e6 / median(single[mode]):.0f} us",
                f">= {single_target:,}/s",
                "met" if ok else "NOT met",
            ]
        )
    for b in bulks:
        for mode in ("new", "update"):
            ok = median(b[mode]) >= bulk_target
            met = met and ok
            what = f"{b['n']:,} in one call" + (", every cron distinct" if b["all_distinct"] else "")
            rows.append(
                [
                    f"put_schedules, {what} ({'new' if mode == 'new' else 'replacing'})",
                    rate(b[mode]),
                    spread(b[mode]),
                    f"{b['n'] / median(b[mode]):.3f} s",
                    f">= {bulk_target:,}/s",
                    "met" if ok else "NOT met",
                ]
            )
    return Result(
        key="schedules",
        title="6. Schedule writes: put_schedule calls and put_schedules in bulk",
        setup=[
            f"{max(bulk_sizes + [n_single]):,} catalogue workers; each schedule from {len(seed.TEMPLATES)} cron templates "
            f"x 60 minutes x {len(seed.ZONES)} zones, every 5th cron spelt with extra blanks, every 8th without a zone "
            '(the default), every 4th with a request `{"options": {"dpi": 600}}` validated against the catalogue.',
            f"put_schedule: {n_single:,} calls from one connection (psycopg, autocommit: one transaction each), "
            "first creating the schedules in an empty table, then updating each (a new cron, so next_run_at is "
            "cleared); timed from the first call sent to the last result read.",
            "put_schedules: one call with all N schedules as one JSON array parameter (serialised before the clock "
            "starts), first into an empty table, then replacing them all (each with a new cron); timed from the call "
            f"sent to its result read. Once more at N={bulk_sizes[0]:,} with every cron distinct.",
            f"Median and range of {reps} rounds each; the table is emptied and VACUUM ANALYZEd before each bulk round.",
            "Checked after every round: exactly N schedules stored, each equal to the spec written (normalised cron, "
            "zone or the default, request, enabled, updated_by, next_run_at NULL), put_schedules' created/replaced "
            f"split, and the rows put_schedules wrote for the first {n_single:,} workers equal to those put_schedule wrote.",
        ],
        headers=["write", "schedules/s (median)", "range", "per call", "target", "verdict"],
        rows=rows,
        target=(
            f"put_schedule >= {single_target:,} calls/s from one connection; put_schedules >= {bulk_target:,} "
            "schedules/s"
            if not quick
            else "quick mode: smoke sizes only"
        ),
        met=met,
        notes=[
            f"The pg_timezone_names scan that validate_timezone ran on every call before issue 12 costs "
            f"{scan * 1000:.1f} ms alone here (a ceiling of {1 / scan:,.0f} calls/s); validate_timezone now looks the "
            "name up in the list taken from that scan when migrate installed the code, and scans only for a name "
            "the list lacks.",
            "put_schedules validates each distinct zone once, each distinct cron's fields once (the minute, the hour "
            "and the (day of month, month, day of week) triple, which decide exactly as validate_cron does: "
            + ", ".join(f"{b['distinct_crons']:,} distinct crons at N={b['n']:,}" for b in bulks)
            + ") and each non-empty request once per (worker, request); every element is held to put_schedule's "
            "rules. 'Every cron distinct': minute x hour x day of month, the worst case for the cron checks.",
        ],
        headline=(
            f"put_schedule {rate(single['new'])}/s new, {rate(single['update'])}/s updates; "
            + "; ".join(f"put_schedules({b['n']:,}) {rate(b['new'])}/s" for b in bulks if not b["all_distinct"])
        ),
        data={"single": {k: v for k, v in single.items() if k != "reference"}, "bulk": bulks, "scan": scan},
    )
