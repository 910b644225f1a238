"""next_fires(): a worker's schedule previewed, the same instants as the shim's cron,
bounded, and clear about a worker it cannot preview."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from helpers import make_worker, put_schedule, raises_sqlstate
from scrinalia_workers.cron import next_occurrence


@pytest.fixture
def ocr(db):
    make_worker(db)
    put_schedule(db, "ocr", "30 2 * 3,10 SUN", "Europe/Berlin")  # March and October Sundays: DST days
    return db


def test_the_next_instants_are_the_shims_and_the_dst_days_say_why(ocr):
    with ocr.transaction():
        (now,) = ocr.execute("SELECT now()").fetchone()
        rows = ocr.execute(
            "SELECT n, fires_at, local_time, timezone, utc_offset, note FROM scrinalia.next_fires('ocr', 12)"
        ).fetchall()
    want, t = [], now
    for _ in range(12):
        t = next_occurrence("30 2 * 3,10 SUN", "Europe/Berlin", t)
        want.append(t)
    assert [r[1] for r in rows] == want and [r[0] for r in rows] == list(range(1, 13))
    assert {r[3] for r in rows} == {"Europe/Berlin"}
    for r in rows:
        assert r[2] == r[1].astimezone(ZoneInfo("Europe/Berlin")).replace(tzinfo=None)
        assert r[4] in (timedelta(hours=1), timedelta(hours=2))
    notes = [r[5] for r in rows if r[5]]
    assert any("does not exist on" in n and n.endswith("fires at 03:00") for n in notes), notes
    assert any("occurs twice on" in n and n.endswith("fires once, at the first") for n in notes), notes
    assert len(notes) < len(rows)  # the other Sundays are not moved


def test_the_default_is_ten(ocr):
    assert ocr.execute("SELECT count(*) FROM scrinalia.next_fires('ocr')").fetchone()[0] == 10


@pytest.mark.parametrize("count", [0, -1, 101, None])
def test_a_count_out_of_range_is_refused(ocr, count):
    with raises_sqlstate("SW002", "next_fires previews 1 to 100 instants"):
        ocr.execute("SELECT * FROM scrinalia.next_fires('ocr', %s::integer)", (count,))
    assert ocr.execute("SELECT count(*) FROM scrinalia.next_fires('ocr', 100)").fetchone()[0] == 100


def test_a_worker_it_cannot_preview_is_answered_clearly(ocr):
    with raises_sqlstate("SW001", "unknown worker"):
        ocr.execute("SELECT * FROM scrinalia.next_fires('nope', 3)")
    make_worker(ocr, "idle")
    with raises_sqlstate("SW005", "has no schedule"):
        ocr.execute("SELECT * FROM scrinalia.next_fires('idle', 3)")
    ocr.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")
    with raises_sqlstate("SW005", "is paused"):
        ocr.execute("SELECT * FROM scrinalia.next_fires('ocr', 3)")


def test_the_reader_may_preview(ocr, connect_as):
    assert connect_as("reader").execute("SELECT count(*) FROM scrinalia.next_fires('ocr', 2)").fetchone()[0] == 2
    with raises_sqlstate("42501"):
        connect_as("monitor").execute("SELECT * FROM scrinalia.next_fires('ocr', 2)")
