"""status names the failed attempt whose owed retry holds the slot, and since when."""

from __future__ import annotations

import json

from helpers import claim, cli, finish, make_worker, scheduled_run


def test_status_shows_a_slot_held_by_an_owed_retry(db_dsn, db):
    make_worker(db, "ocr")
    run_id = scheduled_run(db, "ocr")
    _, token, *_ = claim(db)
    finish(db, run_id, token, "FAILED", "disk full")

    r = cli("status", dsn=db_dsn)
    assert r.code == 0, r.err
    line = next(ln for ln in r.out.splitlines() if ln.startswith("ocr "))
    assert f"#{run_id} FAILED 1/3: owed retry 2/3 since" in line

    data = json.loads(cli("status", "--json", dsn=db_dsn).out)
    (ocr,) = [a for a in data["agenda"] if a["worker_name"] == "ocr"]
    assert (ocr["active_run_id"], ocr["owed_by_run_id"], ocr["owed_attempt"]) == (None, run_id, 2)
    assert ocr["owed_since"]


def test_status_prints_an_instant_no_zone_can_hold(db_dsn, db):
    """A hand-written 'infinity' in a zone ahead of UTC: printed as PostgreSQL prints
    it, not an overflow (the latest datetime shifted east is past year 9999)."""
    make_worker(db, "ocr")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " VALUES ('ocr', '0 3 * * *', 'Asia/Tokyo', 'infinity')"
        " ON CONFLICT (worker_name) DO UPDATE SET timezone = 'Asia/Tokyo', next_run_at = 'infinity'"
    )
    r = cli("status", dsn=db_dsn)
    assert r.code == 0, r.err
    line = next(ln for ln in r.out.splitlines() if ln.startswith("ocr "))
    assert "infinity" in line and "Traceback" not in r.err
