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
