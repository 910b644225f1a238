"""The tick's check of each next instant agrees with cron_fires_at (itself pinned to the
shim's cron by test_cron_fires_at.py): an instant is REFUSED exactly when
cron_fires_at says the cron does not fire then, around DST transitions and for
generated expressions on random days; and the bit masks (archive_cron_masks) decide
most instants, leaving cron_fires_at only what they do not accept (counted with
track_functions). The masks are stored by put_schedule(s) and, for the schedules
already there, by migrate."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from psycopg.types.json import Jsonb
from test_cron_fires_at import DST_CRONS, occurrences

from cron_corpus import gen_valid
from helpers import make_worker, make_workers, put_schedule

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/St_Johns", "Asia/Kolkata", "UTC"]
YEAR = 2031  # ahead of any test run: the tick takes only instants after now()


def transitions(zone: str) -> list[datetime]:
    """A UTC instant two hours before each offset change of `zone` in YEAR."""
    z, out = ZoneInfo(zone), []
    t = datetime(YEAR, 1, 1, tzinfo=UTC)
    while t.year == YEAR:
        if (t + timedelta(minutes=30)).astimezone(z).utcoffset() != t.astimezone(z).utcoffset():
            out.append(t - timedelta(hours=2))
        t += timedelta(minutes=30)
    return out


def tick_cases(db, cases: list[tuple[str, str, datetime]]) -> tuple[int, int, int]:
    """Each case a schedule of its own, unarmed, all ticked in one call with its instant.
    Asserts REFUSED exactly where cron_fires_at says no. Returns (cases, refused, calls
    of the slow check)."""
    workers = make_workers(
        db, len(cases), prefix=f"m{db.execute('SELECT count(*) FROM scrinalia.archive_workers').fetchone()[0]}_"
    )
    crons, zones, ats = [c for c, _, _ in cases], [z for _, z, _ in cases], [t for _, _, t in cases]
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
        " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])",
        (workers, crons, zones),
    )
    db.execute("SELECT scrinalia.store_cron_masks(%s, false)", (sorted(set(crons)),))
    fires = [
        r[0]
        for r in db.execute(
            "SELECT scrinalia.cron_fires_at(c, z, t) FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) AS i(c, z, t)",
            (crons, zones, ats),
        )
    ]
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'pl'")
        db.execute("SELECT * FROM scrinalia.due_schedules()").fetchall()
        got = dict(
            db.execute(
                "SELECT worker_name, decision FROM scrinalia.tick(%s::text[], %s::timestamptz[], 'test')",
                (workers, ats),
            ).fetchall()
        )
        calls = db.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = 'tick_instant_refusal'"
        ).fetchone()[0]
    wrong = [
        (c, z, t.isoformat(), f, got.get(w))
        for w, c, z, t, f in zip(workers, crons, zones, ats, fires)
        if got.get(w) != ("ARMED" if f else "REFUSED")
    ]
    assert wrong == [], f"{len(wrong)} disagreements (cron, zone, instant, fires, decision): {wrong[:10]}"
    refused = fires.count(False)
    assert refused <= calls  # every refusal was the slow check's
    return len(cases), refused, calls


def test_around_dst_transitions(db):
    cases = []
    for zone in ZONES[:4]:
        for start in transitions(zone):
            end = start + timedelta(hours=5)
            for cron in DST_CRONS:
                probe = occurrences(cron, zone, start, end) | {start + timedelta(minutes=m) for m in range(0, 301, 13)}
                cases += [(cron, zone, t) for t in sorted(probe)]
    n, refused, calls = tick_cases(db, cases)
    assert 0 < refused < n
    # the masks decided the occurrences away from the folds and the gaps' ends
    assert calls - refused < (n - refused) / 4, (n, refused, calls)


@pytest.mark.parametrize("seed", [3])
def test_generated_expressions_on_random_days(db, seed):
    rng = random.Random(seed)
    cases = []
    for _ in range(120):
        cron, zone = " ".join(gen_valid(rng).split()), rng.choice(ZONES)
        start = datetime(YEAR, 1, 1, tzinfo=UTC) + timedelta(minutes=rng.randrange(0, 360 * 24 * 60))
        fire = sorted(occurrences(cron, zone, start, start + timedelta(days=1)))[:20]
        probe = set(fire) | {t + timedelta(minutes=1) for t in fire} | {t + timedelta(seconds=1) for t in fire[:3]}
        probe |= {start + timedelta(minutes=rng.randrange(0, 24 * 60)) for _ in range(10)}
        cases += [(cron, zone, t) for t in sorted(probe)]
    n, refused, calls = tick_cases(db, cases)
    assert 0 < refused < n and calls - refused < (n - refused) / 10, (n, refused, calls)


def test_put_schedule_stores_the_masks_once_per_cron(db):
    for w in ("a", "b"):
        make_worker(db, w)
        put_schedule(db, w, "5  4 * * MON-FRI")  # stored with single spaces
    rows = db.execute(
        "SELECT cron, minutes, hours, dows, day_and, hour_star FROM scrinalia.archive_cron_masks"
    ).fetchall()
    assert rows == [("5 4 * * MON-FRI", 1 << 5, 1 << 4, sum(1 << d for d in range(1, 6)), True, False)]


def test_put_schedules_stores_the_masks_of_new_crons(db):
    for w in ("a", "b", "c"):
        make_worker(db, w)
    batch = [
        {"worker_name": "a", "cron": "0 3 * * *"},
        {"worker_name": "b", "cron": "*/20 * 1,15 * SUN"},
        {"worker_name": "c", "cron": "0 3 * * *"},
    ]
    db.execute("SELECT scrinalia.put_schedules(%s)", (Jsonb(batch),))
    got = dict(db.execute("SELECT cron, day_and FROM scrinalia.archive_cron_masks").fetchall())
    assert got == {"0 3 * * *": True, "*/20 * 1,15 * SUN": False}
