"""Only the lock holder decides, with the real processes: the scheduler (run with a
runner's login, as the ADR allows) still ticks, retries and reaps through the fence,
while another session of the same groups gets SW032; and the previous release's
scheduler, still running when this release's SQL is installed, keeps ticking until it
is replaced, then hands over to this release's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from helpers import YEARLY, claim, finish, make_worker, put_schedule, raises_sqlstate
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.procs import Proc

pytestmark = pytest.mark.slow

PREVIOUS = "97f3a12"  # the previous release (0.3.0), whose scheduler may run while this SQL is installed
PREVIOUS_HEAD = "0008_metrics_indexes"
REPO = Path(__file__).resolve().parents[2]


def _as(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


def _due_now(db, worker: str = "ocr") -> None:
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second' WHERE worker_name = %s",
        (worker,),
    )
    db.execute("NOTIFY scrinalia_scheduler")


def _attacks_refused(db, connect_as) -> None:
    """Every group's other sessions are out while a real scheduler holds the lock."""
    for group in ("runner", "operator", "scheduler"):
        c = connect_as(group)
        with raises_sqlstate("SW032", "tick"):
            c.execute("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY['9999-01-01 00:00+00'::timestamptz])")
        with raises_sqlstate("SW032", "reap_expired_leases"):
            c.execute("SELECT * FROM scrinalia.reap_expired_leases()")


def test_the_real_scheduler_ticks_retries_and_reaps_through_the_fence(db, db_dsn, role_logins, connect_as, procs):
    make_worker(db)
    put_schedule(db, "ocr", YEARLY, "UTC")
    s = procs.scheduler(_as(db_dsn, role_logins["runner"]), "--max-sleep", "0.5")
    s.wait_event("lock acquired")
    s.wait_event("armed", worker="ocr")
    _due_now(db)
    run_id = s.wait_event("enqueued", worker="ocr")["run_id"]
    # its failure owes a retry: created by the scheduler's work session
    claimed, token, *_ = claim(db)
    assert claimed == run_id
    finish(db, run_id, token, "FAILED", "boom")
    retry_id = s.wait_event("retry created", retry_of=run_id)["run_id"]
    # the retry's lease runs out: reaped by the scheduler
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (retry_id,))
    assert claim(db, lease="1 second")[0] == retry_id
    s.wait_event("lease reaped", run_id=retry_id)
    _attacks_refused(db, connect_as)
    healthy, reason = db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
    assert healthy, reason
    assert not [e for e in s.events if e.get("sqlstate") == "SW032" or e.get("event") == "pass error"]


def _previous_release(tmp_path: Path) -> Path:
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"]).returncode != 0:
        pytest.fail(f"the previous release {PREVIOUS} is not in this clone: fetch it to run this test")
    out = tmp_path / "previous"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def test_the_previous_release_scheduler_keeps_ticking_then_hands_over(
    db, db_dsn, role_logins, connect_as, procs, tmp_path
):
    """Its heartbeat already names its work session (scheduler_heartbeat(name,
    work_pid) from the lock session, before any tick): the fence lets it decide."""
    old_root = _previous_release(tmp_path)
    env = {"PYTHONPATH": str(old_root / "py_shim"), "SCRINALIA_ROOT": str(old_root)}
    # the database as the previous release left it: a release refuses to start on a newer
    # schema, so its scheduler starts first and this release's migrate comes under it
    heads = m.head_ids()
    m.rollback(db_dsn, len(heads) - heads.index(PREVIOUS_HEAD) - 1)
    subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "migrate"],
        env={**os.environ, **env, "DATABASE_URL": db_dsn},
        check=True,
        capture_output=True,
        timeout=120,
    )
    make_worker(db)
    put_schedule(db, "ocr", YEARLY, "UTC")
    dsn = _as(db_dsn, role_logins["runner"])
    which = subprocess.run(
        [sys.executable, "-c", "import scrinalia_workers.scheduler as s; print(s.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert which.startswith(str(old_root / "py_shim" / "scrinalia_workers" / "scheduler"))  # its code, not ours
    old = procs.append(
        Proc([sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", dsn, "--json", "--max-sleep", "0.5"], env)
    )
    old.wait_event("lock acquired")
    old.wait_event("armed", worker="ocr")
    assert m.migrate(db_dsn), "this release's migrate, under the previous release's scheduler"
    _due_now(db)
    run_id = old.wait_event("enqueued", worker="ocr")["run_id"]
    _, token, *_ = claim(db)
    finish(db, run_id, token, "FAILED", "boom")
    retry_id = old.wait_event("retry created", retry_of=run_id)["run_id"]
    _attacks_refused(db, connect_as)
    # this release's scheduler stands by, and takes over when the old one is stopped
    new = procs.scheduler(dsn, "--max-sleep", "0.5", "--standby-retry", "0.3")
    new.wait_event("standby")
    assert old.stop() == 0
    new.wait_event("lock acquired", timeout=15)
    db.execute("SELECT scrinalia.cancel_run(%s)", (retry_id,))  # the slot free for the next period
    _due_now(db)
    assert new.wait_event("enqueued", worker="ocr")["run_id"] > run_id
    errors = [e for e in old.events + new.events if e.get("level") == "error" or e.get("event") == "pass error"]
    assert not errors, errors
    # one run per period: nothing doubled across the hand-over
    assert db.execute(
        "SELECT count(*) = count(DISTINCT (scheduled_for, attempt)) FROM scrinalia.archive_worker_runs"
        " WHERE trigger = 'SCHEDULE'"
    ).fetchone()[0]
