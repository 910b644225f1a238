"""`schedule next WORKER`: the next instants in the schedule's zone and in UTC, and why a
DST change moves one."""

from __future__ import annotations

import json
import re

from helpers import assert_one_line_error, cli, make_worker, put_schedule


def test_schedule_next_prints_zone_utc_and_the_dst_notes(db_dsn, db):
    make_worker(db)
    put_schedule(db, "ocr", "30 2 * 3,10 SUN", "Europe/Berlin")
    r = cli("schedule", "next", "ocr", "--count", "12", dsn=db_dsn)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "the next 12 firing(s) of ocr"
    assert lines[1].split()[:4] == ["#", "Europe/Berlin", "(offset)", "UTC"]
    rows = [ln for ln in lines[3:] if re.match(r"\d+ ", ln)]
    assert len(rows) == 12
    gap = next(ln for ln in rows if "does not exist" in ln)
    assert re.search(r" 03:00 \(\+02:00\) .* 01:00:00Z +02:30 does not exist on \d{4}-03-\d\d: fires at 03:00$", gap), (
        gap
    )
    assert any("occurs twice on" in ln and " 02:30 (+02:00) " in ln and " 00:30:00Z " in ln for ln in rows), rows

    data = json.loads(cli("schedule", "next", "ocr", "--count", "2", "--json", dsn=db_dsn).out)
    assert [d["n"] for d in data] == [1, 2] and data[0]["timezone"] == "Europe/Berlin"
    assert data[0]["fires_at"] < data[1]["fires_at"]


def test_schedule_next_refusals_are_one_line(db_dsn, db):
    make_worker(db)
    make_worker(db, "idle")
    put_schedule(db, "ocr", "0 2 * * *", "UTC", enabled=False)
    assert_one_line_error(cli("schedule", "next", "ocr", dsn=db_dsn), 1, "SW005", "paused")
    assert_one_line_error(cli("schedule", "next", "idle", dsn=db_dsn), 1, "SW005", "no schedule")
    assert_one_line_error(cli("schedule", "next", "nope", dsn=db_dsn), 1, "SW001")
    assert_one_line_error(cli("schedule", "next", "idle", "--count", "101", dsn=db_dsn), 1, "SW002", "1 to 100")
    assert_one_line_error(cli("schedule", "next", "idle", "--count", "0", dsn=db_dsn), 2)
