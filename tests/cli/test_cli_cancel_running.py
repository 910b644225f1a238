"""scrinalia-workers cancel takes a RUNNING run: CANCELLED at once, its runner fenced."""

from __future__ import annotations

import json

from helpers import claim, cli, make_worker


def test_cancel_a_running_run(db_dsn, db):
    make_worker(db)
    run_id = json.loads(cli("enqueue", "ocr", "--json", dsn=db_dsn).out)["run_id"]
    _, token, *_ = claim(db)
    r = cli("cancel", str(run_id), dsn=db_dsn)
    assert r.code == 0, r.err
    assert f"cancelled run #{run_id} CANCELLED (ocr, CLI) while it ran: its runner stops it" in r.out
    [(lost,)] = db.execute("SELECT lost_reason FROM scrinalia.heartbeat_runs(%s, %s)", ([run_id], [token])).fetchall()
    assert lost.startswith("the run is CANCELLED (cancelled by ")
    # the slot is free: the next enqueue is taken
    assert cli("enqueue", "ocr", dsn=db_dsn).code == 0
