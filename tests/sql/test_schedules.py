"""Schedules: validated in SQL, stored with their zone, armed by the scheduler."""

from __future__ import annotations

import psycopg
import pytest

from helpers import make_worker, put_schedule, raises_sqlstate, set_next_run, tick


def schedule(db, worker="ocr"):
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM scrinalia.get_schedule(%s)", (worker,)).fetchone()


def test_put_stores_the_validated_schedule_unarmed(db):
    make_worker(db)
    s = put_schedule(db, "ocr", "0   2 * *  MON-FRI", "America/Sao_Paulo", {"options": {"lang": "eng"}})
    assert s is not None
    got = schedule(db)
    assert got["cron"] == "0 2 * * MON-FRI"
    assert got["timezone"] == "America/Sao_Paulo"
    assert got["request"] == {"options": {"lang": "eng"}}
    assert got["enabled"] is True and got["next_run_at"] is None
    assert got["updated_by"] == "test"


@pytest.mark.parametrize("cron", ["0 2 * * * *", "0 24 * * *", "0 2 L * *", "@daily", "", "0 2 * *"])
def test_put_rejects_a_bad_cron(db, cron):
    make_worker(db)
    with raises_sqlstate("SW003"):
        put_schedule(db, "ocr", cron)
    assert schedule(db) is None


@pytest.mark.parametrize("tz", ["Mars/Olympus", "posix/Europe/Berlin", "localtime", "", "../etc/passwd"])
def test_put_rejects_a_bad_zone(db, tz):
    make_worker(db)
    with raises_sqlstate("SW004", "invalid time zone"):
        put_schedule(db, "ocr", tz=tz)


def test_put_rejects_unknown_worker_and_bad_request(db):
    with raises_sqlstate("SW001"):
        put_schedule(db, "ghost")
    make_worker(db)
    with raises_sqlstate("SW002", "unknown preset"):
        put_schedule(db, "ocr", request={"preset": "nope"})


def test_put_without_zone_stores_the_default_timezone(db):
    make_worker(db)
    db.execute("SELECT scrinalia.set_default_timezone('Europe/Lisbon')")
    put_schedule(db, "ocr", tz=None)
    assert schedule(db)["timezone"] == "Europe/Lisbon"
    with raises_sqlstate("SW004"):
        db.execute("SELECT scrinalia.set_default_timezone('Nowhere/Town')")


def test_put_from_psql_sends_a_notify(db, db_dsn):
    make_worker(db)
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_scheduler")
        put_schedule(db, "ocr")
        got = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in got] == ["scrinalia_scheduler"]


def test_editing_only_the_request_keeps_the_next_run(db):
    make_worker(db)
    put_schedule(db, "ocr")
    tick(db)  # arms it
    armed = schedule(db)["next_run_at"]
    assert armed is not None
    put_schedule(db, "ocr", request={"options": {"dpi": 100}})
    assert schedule(db)["next_run_at"] == armed
    put_schedule(db, "ocr", cron="0 3 * * *")
    assert schedule(db)["next_run_at"] is None


def test_pause_removes_it_from_the_due_set_and_resume_rearms(db):
    make_worker(db)
    put_schedule(db, "ocr")
    tick(db)
    set_next_run(db, "ocr", "1 hour")
    db.execute("SELECT scrinalia.set_schedule_enabled('ocr', false, 'alice')")
    due, decisions = tick(db)
    assert due == [] and decisions == []
    assert schedule(db)["next_run_at"] is None
    db.execute("SELECT scrinalia.set_schedule_enabled('ocr', true, 'alice')")
    due, decisions = tick(db)
    # re-enabled: recomputed from the cron, the paused periods are not caught up
    assert [(d[0], d[1]) for d in decisions] == [("ocr", "ARMED")]
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 0


def test_put_disabled_then_enabled_recomputes(db):
    make_worker(db)
    put_schedule(db, "ocr", enabled=False)
    assert tick(db)[1] == []
    put_schedule(db, "ocr", enabled=True)
    assert [d[1] for d in tick(db)[1]] == ["ARMED"]


def test_delete_and_missing_schedules(db):
    make_worker(db)
    put_schedule(db, "ocr")
    assert db.execute("SELECT worker_name FROM scrinalia.delete_schedule('ocr')").fetchone()[0] == "ocr"
    assert schedule(db) is None
    with raises_sqlstate("SW005", "has no schedule"):
        db.execute("SELECT scrinalia.delete_schedule('ocr')")
    with raises_sqlstate("SW005"):
        db.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")


def test_unknown_worker_and_missing_schedule_are_told_apart(db):
    with raises_sqlstate("SW001", "unknown worker 'ghost'"):
        db.execute("SELECT scrinalia.delete_schedule('ghost')")
    with raises_sqlstate("SW001"):
        db.execute("SELECT scrinalia.set_schedule_enabled('ghost', true)")
