"""SQL's scrinalia.cron_fire_previews (behind next_fires) and Python's
cron.next_occurrence, applied again and again, agree on a schedule's next instants:
across every DST transition of test_cron_fires_at (gaps, folds, a 30-minute shift,
DST at midnight), for generated expressions from random instants, and for the rarest
cron; and the previews say why a DST change moved an instant."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from test_cron_fires_at import DST_CRONS, TRANSITIONS

from cron_corpus import gen_valid
from helpers import raises_sqlstate
from scrinalia_workers.cron import next_occurrence

PREVIEWS = "SELECT fires_at FROM scrinalia.cron_fire_previews(%s, %s, %s, %s)"


def python_fires(cron: str, zone: str, after: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        after = next_occurrence(cron, zone, after)
        out.append(after)
    return out


def sql_fires(db, cron: str, zone: str, after: datetime, n: int) -> list[datetime]:
    return [r[0] for r in db.execute(PREVIEWS, (cron, zone, after, n)).fetchall()]


def test_across_dst_transitions(db):
    wrong = []
    for zone, start in TRANSITIONS:
        for cron in DST_CRONS:
            # from before the change, and from inside its hours (a fold's second pass)
            for after in (start, start + timedelta(hours=2, minutes=30), start + timedelta(hours=3, seconds=1)):
                want = python_fires(cron, zone, after, 12)
                got = sql_fires(db, cron, zone, after, 12)
                if got != want:
                    wrong.append((cron, zone, after.isoformat(), got[:3], want[:3]))
    assert wrong == [], f"{len(wrong)} disagreements, first ones: {wrong[:5]}"


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_expressions_from_random_instants(db, seed):
    rng = random.Random(seed)
    zones = [z for z, _ in TRANSITIONS]
    wrong = []
    for _ in range(60):
        cron, zone = gen_valid(rng), rng.choice(zones)
        after = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(0, 3 * 365 * 24 * 3600))
        want = python_fires(cron, zone, after, 8)
        got = sql_fires(db, cron, zone, after, 8)
        if got != want:
            wrong.append((cron, zone, after.isoformat(), got[:3], want[:3]))
    assert wrong == [], f"{len(wrong)} disagreements, first ones: {wrong[:5]}"


def test_the_rarest_cron_and_the_count(db):
    after = datetime(2026, 6, 1, tzinfo=UTC)
    want = python_fires("0 0 29 2 *", "Europe/Berlin", after, 30)
    assert sql_fires(db, "0 0 29 2 *", "Europe/Berlin", after, 30) == want
    assert want[-1].year > 2100  # 2100 is no leap year: skipped
    assert sql_fires(db, "* * * * *", "UTC", after, 1) == [after + timedelta(minutes=1)]
    with raises_sqlstate("SW003"):
        db.execute(PREVIEWS, ("61 * * * *", "UTC", after, 3))


def _notes(db, cron: str, zone: str, after: datetime, n: int) -> list[tuple[str, str | None]]:
    return [
        (r[0].strftime("%Y-%m-%d %H:%M"), r[1])
        for r in db.execute(
            "SELECT local_time, note FROM scrinalia.cron_fire_previews(%s, %s, %s, %s)", (cron, zone, after, n)
        ).fetchall()
    ]


def test_the_previews_say_why_a_dst_change_moved_an_instant(db):
    spring = datetime(2027, 3, 27, 12, 0, tzinfo=UTC)
    assert _notes(db, "30 2 * * *", "Europe/Berlin", spring, 2) == [
        ("2027-03-28 03:00", "02:30 does not exist on 2027-03-28: fires at 03:00"),
        ("2027-03-29 02:30", None),
    ]
    autumn = datetime(2027, 10, 30, 12, 0, tzinfo=UTC)
    assert _notes(db, "30 2 * * *", "Europe/Berlin", autumn, 2) == [
        ("2027-10-31 02:30", "02:30 occurs twice on 2027-10-31: fires once, at the first"),
        ("2027-11-01 02:30", None),
    ]
    hourly = _notes(db, "30 * * * *", "Europe/Berlin", datetime(2027, 10, 30, 23, 0, tzinfo=UTC), 3)
    assert hourly == [
        ("2027-10-31 01:30", None),
        ("2027-10-31 02:30", "02:30 occurs twice on 2027-10-31: fires at both, the hour keeps its rhythm"),
        ("2027-10-31 02:30", "02:30 occurs twice on 2027-10-31: the second time, as the hour field is *"),
    ]
