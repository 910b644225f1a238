"""status prints the alerts of now (current_alerts()), each with what to do, as a
reader sees them: the workers' work that stopped among them."""

from __future__ import annotations

import json

import psycopg

from helpers import claim, cli, make_worker
from scrinalia_workers.cli.commands.status import ALERTS_SHOWN


def _overrunning(db, worker):
    make_worker(db, worker)
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (worker,)).fetchone()[0]
    claim(db, workers=[worker])
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - interval '50 minutes' WHERE run_id = %s",
        (run_id,),
    )
    return run_id


def test_status_names_a_stuck_run_and_what_to_do(db_dsn, db, role_logins):
    reader = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    r = cli("status", dsn=reader)
    assert r.code == 0, r.err
    assert "RUN_OVERRUNNING" not in r.out
    assert "  SCHEDULER_UNHEALTHY since -: scheduling is not happening: no scheduler holds the lock" in r.out

    run_id = _overrunning(db, "ocr")
    r = cli("status", dsn=reader)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    (i,) = [n for n, ln in enumerate(lines) if ln.startswith("  RUN_OVERRUNNING since ")]
    assert f"run #{run_id} of ocr has been RUNNING for 00:50:" in lines[i]
    assert f"scrinalia-workers cancel {run_id}" in lines[i]
    assert lines[i + 1].startswith("    what to do: ") and "cancel" in lines[i + 1]

    data = json.loads(cli("status", "--json", dsn=reader).out)
    [alert] = [a for a in data["alerts"] if a["kind"] == "RUN_OVERRUNNING"]
    assert (alert["worker_name"], alert["run_ids"], data["alerts_cut"]) == ("ocr", [run_id], False)


def test_status_prints_the_oldest_alerts_and_says_there_are_more(db_dsn, db):
    for n in range(ALERTS_SHOWN + 2):
        _overrunning(db, f"w{n:02d}")
    r = cli("status", dsn=db_dsn)
    assert r.code == 0, r.err
    assert f"alerts (the oldest {ALERTS_SHOWN}):" in r.out
    assert sum(ln.startswith("    what to do: ") for ln in r.out.splitlines()) == ALERTS_SHOWN
    assert "and more: SELECT * FROM scrinalia.current_alerts()" in r.out
    assert json.loads(cli("status", "--json", dsn=db_dsn).out)["alerts_cut"] is True


def test_status_shows_each_workers_maximum_run_time(db_dsn, db):
    make_worker(db, "ocr")
    make_worker(db, "thumbs")
    db.execute("SELECT scrinalia.set_max_run_time('thumbs', interval '10 minutes')")
    r = cli("status", dsn=db_dsn)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    header = next(ln for ln in lines if ln.startswith("worker ") and "max run time" in ln)
    at = header.index("max run time")
    table = lines[lines.index(header) + 2 :]
    table = table[: table.index("")]  # the agenda's rows, up to the blank line
    rows = {ln.split()[0]: ln[at:].split()[0] for ln in table if ln.startswith(("ocr ", "thumbs "))}
    assert rows == {"ocr": "1h00m00s", "thumbs": "10m00s"}
