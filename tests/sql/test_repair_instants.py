"""Stored instants no cron or policy could have produced (what a clock ten years ahead
leaves behind, or a hand-written value) are found and repaired: a lease longer than a
runner may take is reaped, a retry held back beyond the retry cap is brought to it, a
schedule due later than its cron's next occurrence is re-armed; each is an alert.
Legitimate instants are left alone."""

from __future__ import annotations

from datetime import timedelta

from helpers import (
    claim,
    finish,
    make_worker,
    make_workers,
    nested_plans,
    put_schedule,
    raises_sqlstate,
    run_row,
    scheduled_run,
    table_fingerprints,
)
from scrinalia_workers.cron import next_occurrence

REPAIR = "SELECT kind, worker_name, run_id, was, repaired_to, message FROM scrinalia.repair_instants('test')"
REARM = (
    "SELECT worker_name, was, next_run_at FROM scrinalia.rearm_schedules_ahead(%s::text[], %s::text[],"
    " %s::timestamptz[], 'test')"
)


def _alerts(db, kind):
    return db.execute(
        "SELECT worker_name, run_ids, message FROM scrinalia.current_alerts() WHERE kind = %s", (kind,)
    ).fetchall()


def test_a_lease_ten_years_long_is_reaped_and_its_retry_owed(db):
    make_worker(db, "ocr")
    run_id = scheduled_run(db, "ocr")
    _, token, *_ = claim(db, lease="1 minute")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() + interval '10 years' WHERE run_id = %s",
        (run_id,),
    )
    # the stall: the slot stays busy, the reaper waits ten years
    with raises_sqlstate("SW010"):
        db.execute("SELECT scrinalia.enqueue('ocr')")
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0

    rows = db.execute(REPAIR).fetchall()
    assert [(k, w, r) for k, w, r, *_ in rows] == [("LEASE", "ocr", run_id)]
    assert "longer than a runner may take (1 day)" in rows[0][5]
    row = run_row(db, run_id)
    assert (row["status"], row["retry_pending"], row["lease_token"]) == ("INTERRUPTED", True, None)
    assert [a[1] for a in _alerts(db, "LEASE_REAPED")] == [[run_id]]
    # the runner that held it has lost it, as any expired lease
    with raises_sqlstate("SW020"):
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))


def test_a_lease_of_the_longest_allowed_length_is_left_alone(db):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue('ocr')")
    run_id, *_ = claim(db, lease="1 day")
    before = table_fingerprints(db)
    assert db.execute(REPAIR).fetchall() == []
    assert table_fingerprints(db) == before
    assert run_row(db, run_id)["status"] == "RUNNING"


def _failed_retry(db):
    make_worker(db, "ocr")
    run_id = scheduled_run(db, "ocr")
    _, token, *_ = claim(db)
    finish(db, run_id, token, "FAILED", "disk full")
    (retry_id,) = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()
    return retry_id


def test_a_retry_held_back_ten_years_is_brought_to_the_cap(db):
    retry_id = _failed_retry(db)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET not_before = now() + interval '10 years' WHERE run_id = %s",
        (retry_id,),
    )
    with raises_sqlstate("SW010", "retry not before"):
        db.execute("SELECT scrinalia.enqueue('ocr')")

    rows = db.execute(REPAIR).fetchall()
    assert [(k, w, r) for k, w, r, *_ in rows] == [("NOT_BEFORE", "ocr", retry_id)]
    row = run_row(db, retry_id)
    assert row["not_before"] == row["created_at"] + timedelta(minutes=30) == rows[0][4]
    assert row["status"] == "QUEUED" and row["error_fingerprint"] == "not-before-beyond-policy"
    (alert,) = _alerts(db, "INSTANT_REPAIRED")
    assert alert[:2] == ("ocr", [retry_id]) and "longest retry delay" in alert[2]
    # a second look finds nothing more
    assert db.execute(REPAIR).fetchall() == []


def test_a_retry_within_the_cap_is_left_alone(db):
    _failed_retry(db)
    before = table_fingerprints(db)
    assert db.execute(REPAIR).fetchall() == []
    assert table_fingerprints(db) == before


def test_a_schedule_ten_years_ahead_is_re_armed_to_its_next_occurrence(db):
    make_worker(db, "ahead")
    make_worker(db, "fine")
    put_schedule(db, "ahead", "0 3 * * *", "Europe/Berlin")
    put_schedule(db, "fine", "0 3 * * *", "Europe/Berlin")
    now = db.execute("SELECT now()").fetchone()[0]
    nxt = next_occurrence("0 3 * * *", "Europe/Berlin", now)
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = %s", (nxt,))
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '10 years'"
        " WHERE worker_name = 'ahead'"
    )
    assert db.execute("SELECT cron, timezone FROM scrinalia.armed_schedule_crons()").fetchall() == [
        ("0 3 * * *", "Europe/Berlin")
    ]
    rows = db.execute(REARM, (["0 3 * * *"], ["Europe/Berlin"], [nxt])).fetchall()
    assert [(w, n) for w, _, n in rows] == [("ahead", nxt)]
    got = dict(db.execute("SELECT worker_name, next_run_at FROM scrinalia.archive_worker_schedules").fetchall())
    assert got == {"ahead": nxt, "fine": nxt}
    (alert,) = _alerts(db, "INSTANT_REPAIRED")
    assert alert[0] == "ahead" and "later than the next occurrence of its cron" in alert[2]


def test_rearm_refuses_an_instant_its_cron_does_not_produce(db):
    make_worker(db, "ahead")
    put_schedule(db, "ahead", "0 3 * * *", "Europe/Berlin")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '10 years'")
    before = table_fingerprints(db)
    odd = db.execute("SELECT now() + interval '1 hour'").fetchone()[0]
    with raises_sqlstate("SW030", "must be an occurrence of its cron"):
        db.execute(REARM, (["0 3 * * *"], ["Europe/Berlin"], [odd]))
    with raises_sqlstate("SW030", "must be an occurrence of its cron"):
        db.execute(REARM, (["0 3 * * *"], ["Europe/Berlin"], [odd.replace(year=odd.year - 1)]))
    assert table_fingerprints(db) == before


def test_the_re_arm_joins_the_catalogue_by_hash_not_by_sorting_it(db):
    """The repair runs every minute over every armed schedule: the schedules are found
    by a hash of the (cron, zone) pairs, not by sorting the whole catalogue on its cron
    text for a merge join (the planner's choice on a catalogue of this shape)."""
    names = make_workers(db, 10000)
    # one transaction: one now() for the test's instants and the functions' (a next
    # occurrence a minute ahead must not come due while a slow machine runs the test)
    with db.transaction():
        now = db.execute("SELECT now()").fetchone()[0]
        templates = ["{m} * * * *", "{m} 2 * * *", "{m} 6 * * 1-5", "{m} */4 * * *", "{m} 3 1 * *", "*/15 * * * *"]
        zones = ["UTC", "Europe/Berlin", "America/Sao_Paulo", "America/New_York", "Asia/Tokyo", "Asia/Kolkata"]
        pairs = [
            (templates[i % len(templates)].replace("{m}", str(i // 7 % 60)), zones[i // 3 % len(zones)])
            for i in range(len(names))
        ]
        nexts = {p: next_occurrence(*p, now) for p in set(pairs)}
        db.execute(
            "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
            " SELECT w, c, z, now() - interval '1 minute' FROM unnest(%s::text[], %s::text[], %s::text[]) AS i(w, c, z)",
            (names, [c for c, _ in pairs], [z for _, z in pairs]),
        )
        # the statistics of a big tick's moment: every schedule due; then each is armed
        db.execute("ANALYZE scrinalia.archive_worker_schedules")
        db.execute(
            "UPDATE scrinalia.archive_worker_schedules s SET next_run_at = i.n"
            " FROM unnest(%s::text[], %s::timestamptz[]) AS i(w, n) WHERE s.worker_name = i.w",
            (names, [nexts[p] for p in pairs]),
        )
        db.execute(
            "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '10 years' WHERE worker_name = %s",
            (names[7],),
        )
        armed = db.execute("SELECT cron, timezone FROM scrinalia.armed_schedule_crons()").fetchall()
        assert sorted(armed) == sorted(nexts)
        plans = nested_plans(db)
        rows = db.execute(REARM, ([c for c, _ in armed], [z for _, z in armed], [nexts[p] for p in armed])).fetchall()
        assert [(w, n) for w, _, n in rows] == [(names[7], nexts[pairs[7]])]
        (update,) = [p for p in plans if "UPDATE scrinalia.archive_worker_schedules" in p]
        assert "Hash Join" in update and "Merge Join" not in update and "Sort" not in update, update
