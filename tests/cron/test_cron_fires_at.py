"""SQL's scrinalia.cron_fires_at and Python's cron.next_occurrence agree on which
instants a (cron, zone) fires at: every minute around DST transitions (gaps, folds,
a 30-minute shift, DST at midnight), many generated expressions over random days, and
the instants next to each occurrence. rearm_schedules_ahead() checks instants with it."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from cron_corpus import gen_valid
from helpers import raises_sqlstate
from scrinalia_workers.cron import next_occurrence

FIRES = "SELECT scrinalia.cron_fires_at(c, z, t) FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) AS i(c, z, t)"

# (zone, a UTC instant a few hours before a transition)
TRANSITIONS = [
    ("Europe/Berlin", datetime(2026, 3, 29, 0, 0, tzinfo=UTC)),  # 02:00 -> 03:00
    ("Europe/Berlin", datetime(2026, 10, 25, 0, 0, tzinfo=UTC)),  # 03:00 -> 02:00
    ("America/New_York", datetime(2026, 3, 8, 5, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 4, 0, tzinfo=UTC)),
    ("America/Sao_Paulo", datetime(2018, 11, 4, 1, 0, tzinfo=UTC)),  # midnight skipped
    ("America/Sao_Paulo", datetime(2018, 2, 18, 0, 0, tzinfo=UTC)),  # 23:xx twice
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 14, 0, tzinfo=UTC)),  # 30 minutes
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 13, 0, tzinfo=UTC)),
    ("Asia/Kolkata", datetime(2026, 6, 1, 0, 0, tzinfo=UTC)),
    ("UTC", datetime(2028, 2, 28, 22, 0, tzinfo=UTC)),
]

DST_CRONS = [
    "* * * * *",
    "*/15 * * * *",
    "30 2 * * *",
    "0 2 * * *",
    "15 2 * * *",
    "0,30 0,1 * * *",
    "30 23 * * *",
    "0 0 * * *",
    "*/7 */2 * * *",
    "45 1-3 * * SUN",
    "0 * 29 2 *",
    "5 0 1,15 * MON-FRI",
]


def occurrences(cron: str, zone: str, start: datetime, end: datetime) -> set[datetime]:
    out = set()
    t = next_occurrence(cron, zone, start - timedelta(microseconds=1))
    while t <= end:
        out.add(t)
        t = next_occurrence(cron, zone, t)
    return out


def compare(db, cases: list[tuple[str, str, datetime]], expected: list[bool]) -> None:
    got = [
        r[0]
        for r in db.execute(
            FIRES, ([c for c, _, _ in cases], [z for _, z, _ in cases], [t for _, _, t in cases])
        ).fetchall()
    ]
    wrong = [(c, z, t.isoformat(), e) for (c, z, t), e, g in zip(cases, expected, got) if e != g]
    assert wrong == [], f"{len(wrong)} disagreements, first ones (cron, zone, instant, python says): {wrong[:10]}"


def test_every_minute_around_dst_transitions(db):
    cases, expected = [], []
    for zone, start in TRANSITIONS:
        end = start + timedelta(hours=6)
        for cron in DST_CRONS:
            fire = occurrences(cron, zone, start, end)
            minutes = {start + timedelta(minutes=m) for m in range(6 * 60 + 1)}
            for t in sorted(minutes | fire):
                cases.append((cron, zone, t))
                expected.append(t in fire)
    assert any(expected) and not all(expected)
    compare(db, cases, expected)


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_expressions_on_random_days(db, seed):
    rng = random.Random(seed)
    zones = [z for z, _ in TRANSITIONS]
    cases, expected = [], []
    for _ in range(80):
        cron, zone = gen_valid(rng), rng.choice(zones)
        start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=rng.randrange(0, 3 * 365 * 24 * 60))
        end = start + timedelta(days=1)
        fire = occurrences(cron, zone, start, end)
        # each occurrence, its neighbours, and random minutes and seconds of the window
        probe = set(fire)
        for t in list(fire)[:50]:
            probe |= {t - timedelta(minutes=1), t + timedelta(minutes=1), t + timedelta(seconds=1)}
        probe |= {start + timedelta(minutes=rng.randrange(0, 24 * 60)) for _ in range(40)}
        probe.add(start + timedelta(seconds=rng.randrange(0, 24 * 3600)))
        for t in sorted(x for x in probe if start <= x <= end):
            cases.append((cron, zone, t))
            expected.append(t in fire)
    assert sum(expected) > 50
    compare(db, cases, expected)


def test_nothing_odd_fires(db):
    cases = [
        ("* * * * *", "UTC", datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)),  # not on a minute
        ("0 3 * * *", "Europe/Berlin", datetime(9999, 1, 1, 2, 0, tzinfo=UTC)),
    ]
    compare(
        db,
        cases,
        [False, next_occurrence("0 3 * * *", "Europe/Berlin", cases[1][2] - timedelta(minutes=1)) == cases[1][2]],
    )
    assert db.execute("SELECT scrinalia.cron_fires_at('* * * * *', 'UTC', 'infinity')").fetchone()[0] is False
    with raises_sqlstate("SW003"):
        db.execute("SELECT scrinalia.cron_fires_at('61 * * * *', 'UTC', now())")
