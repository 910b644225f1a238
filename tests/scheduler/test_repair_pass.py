"""What a forward clock excursion leaves behind (a next_run_at, a retry's not_before, a
dead runner's lease, each ten years ahead) used to stall the worker for good, health
healthy and no alert. A holder's pass now repairs all three, with a log line and an
alert each; it looks at its first pass and then every REPAIR_EVERY_SECONDS (the bound
is tested by moving the pacing instant, not by waiting)."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pytest

from helpers import claim, finish, make_worker, put_schedule, raises_sqlstate, run_row, scheduled_run
from scrinalia_workers import cron
from scrinalia_workers.logs import EventLog
from scrinalia_workers.scheduler import Scheduler, tick


@pytest.fixture
def holder(db_dsn):
    out = io.StringIO()
    s = Scheduler(db_dsn, name=f"repair-{uuid.uuid4().hex[:8]}", log=EventLog(json_lines=True, stream=out))
    assert s._acquire()
    s.events = lambda: [json.loads(x) for x in out.getvalue().splitlines()]
    yield s
    s._close()


def _ten_years_ahead(db):
    """Three workers, each stalled by one instant ten years ahead. Returns their runs."""
    for w in ("sched", "retry", "lease"):
        make_worker(db, w)
    put_schedule(db, "sched", "*/5 * * * *", "Europe/Berlin")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '10 years'"
        " WHERE worker_name = 'sched'"
    )
    failed = scheduled_run(db, "retry")
    _, token, *_ = claim(db, workers=["retry"])
    finish(db, failed, token, "FAILED", "boom")
    (retry_id,) = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET not_before = now() + interval '10 years' WHERE run_id = %s",
        (retry_id,),
    )
    lease_run = scheduled_run(db, "lease")
    claim(db, workers=["lease"])
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() + interval '10 years' WHERE run_id = %s",
        (lease_run,),
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '10 years'"
        " WHERE worker_name IN ('retry', 'lease')"
    )
    return retry_id, lease_run


def test_one_pass_repairs_what_a_clock_ten_years_ahead_left(db, holder):
    retry_id, lease_run = _ten_years_ahead(db)
    for w in ("retry", "lease"):
        with raises_sqlstate("SW010"):
            db.execute("SELECT scrinalia.enqueue(%s)", (w,))

    holder.tick()

    now = db.execute("SELECT now()").fetchone()[0]
    nxt = dict(db.execute("SELECT worker_name, next_run_at FROM scrinalia.archive_worker_schedules").fetchall())
    assert nxt["sched"] <= cron.next_occurrence("*/5 * * * *", "Europe/Berlin", now)
    assert all(nxt[w] < now + timedelta(days=2) for w in ("retry", "lease"))
    retry = run_row(db, retry_id)
    assert retry["not_before"] == retry["created_at"] + timedelta(minutes=30)
    assert run_row(db, lease_run)["status"] == "INTERRUPTED"

    events = {e["event"] for e in holder.events() if e.get("level") == "warning"}
    assert {"schedule re-armed", "retry delay repaired", "lease reaped"} <= events
    kinds = db.execute("SELECT kind, worker_name FROM scrinalia.current_alerts() ORDER BY 1, 2").fetchall()
    assert ("INSTANT_REPAIRED", "retry") in kinds and ("LEASE_REAPED", "lease") in kinds
    assert ("INSTANT_REPAIRED", "sched") in kinds and ("INSTANT_REPAIRED", "lease") in kinds


def test_the_repair_is_paced_and_comes_back_within_its_bound(db, db_dsn, monkeypatch):
    """The first pass looks for bad stored instants, the next ones not until repair_every
    has passed on the scheduler's own clock (injected here: nothing waits)."""
    from scrinalia_workers.scheduler import daemon
    from scrinalia_workers.testkit.clock import FakeClock

    looks: list[bool] = []

    class Recorded(tick.Pass):
        def __init__(self, *a, **kw):
            looks.append(kw["repair"])
            super().__init__(*a, **kw)

    monkeypatch.setattr(daemon, "Pass", Recorded)
    clock = FakeClock(1000.0)
    s = Scheduler(db_dsn, name=f"paced-{uuid.uuid4().hex[:8]}", log=EventLog(stream=io.StringIO()), clock=clock)
    assert s._acquire()
    try:
        s.tick()
        s.tick()
        clock.advance(s.settings.repair_every - 0.5)
        s.tick()
        clock.advance(0.5)
        s.tick()
        s.tick()
    finally:
        s._close()
    # (the first before the due schedules, the later ones after them)
    assert looks == [tick.Repair.BEFORE, None, None, tick.Repair.AFTER, None]
    assert s.settings.repair_every <= 60


@pytest.mark.parametrize("first", [True, False])
def test_a_due_schedule_waits_for_the_first_repair_but_not_for_the_later_ones(db, holder, monkeypatch, first):
    """At a scheduler's first pass the stored instants are repaired before anything is
    decided on them; the repair each repair_every brings reads every armed schedule,
    and comes after the due schedules of its pass are enqueued."""
    make_worker(db, "due")
    put_schedule(db, "due", "*/5 * * * *", "UTC")
    holder.tick()  # the first pass: armed
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '30 seconds'")
    if first:
        holder._next_repair = None  # (as a scheduler just started)
    else:
        holder._next_repair = holder.clock.monotonic() - 1  # (a minute passed)
    seen: list[int] = []
    real = tick.repair_instants

    def repair(*args, **kwargs):
        seen.append(
            db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name = 'due'").fetchone()[0]
        )
        return real(*args, **kwargs)

    monkeypatch.setattr(tick, "repair_instants", repair)
    assert holder.tick()
    assert seen == ([0] if first else [1])
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name = 'due'").fetchone()[0] == 1


def test_a_re_arm_the_server_refuses_is_logged_and_the_tick_goes_on(db, holder, monkeypatch):
    # as if the server's zone rules and the shim's disagreed: an instant its cron does not produce
    make_worker(db, "ahead")
    make_worker(db, "due")
    put_schedule(db, "ahead", "0 3 * * *", "Europe/Berlin")
    put_schedule(db, "due", "0 3 * * *", "UTC")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '10 years'"
        " WHERE worker_name = 'ahead'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 minute'"
        " WHERE worker_name = 'due'"
    )
    real = tick.Occurrences.after_each

    def skewed(self, pairs, t, **kw):
        got = real(self, pairs, t, **kw)
        return [n + timedelta(seconds=7) if p == ("0 3 * * *", "Europe/Berlin") else n for p, n in zip(pairs, got)]

    monkeypatch.setattr(tick.Occurrences, "after_each", skewed)
    holder.tick()
    (refused,) = [e for e in holder.events() if e["event"] == "schedule re-arm refused"]
    assert "must be an occurrence of its cron" in refused["reason"]
    assert [e["worker"] for e in holder.events() if e["event"] == "enqueued"] == ["due"]
    far = db.execute(
        "SELECT next_run_at > now() + interval '9 years' FROM scrinalia.archive_worker_schedules"
        " WHERE worker_name = 'ahead'"
    ).fetchone()[0]
    assert far  # nothing written for it


def test_a_run_past_its_maximum_run_time_is_its_own_line(db, holder):
    """The reaper ends a hung run at its worker's maximum run time: the scheduler says
    so as `run timed out` (a warning naming the limit), not as a lease that ran out."""
    make_worker(db, "hung")
    db.execute("SELECT scrinalia.set_max_run_time('hung', interval '1 minute')")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('hung')").fetchone()[0]
    claim(db, lease="1 hour")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - interval '2 minutes' WHERE run_id = %s",
        (run_id,),
    )
    holder.tick()
    (line,) = [e for e in holder.events() if e.get("run_id") == run_id]
    assert (line["event"], line["level"], line["worker"]) == ("run timed out", "warning", "hung")
    assert "1 minute" in line["reason"] or "00:01:00" in line["reason"]
    assert run_row(db, run_id)["error_fingerprint"] == "max-run-time"
