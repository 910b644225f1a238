"""What status reads of a large install: agenda_totals() and queue_totals() count on the
server, agenda_focus() puts the workers an operator looks at first (overdue, set aside,
retry owed, running, next due, then the rest by name) at the top and is the same
order however small the page, busiest_queues() the most pending first."""

from __future__ import annotations

import pytest

from helpers import claim, finish, make_worker, make_workers, put_schedule, raises_sqlstate, scheduled_run, tick

FOCUS = "SELECT position, focus, worker_name FROM scrinalia.agenda_focus(%s) ORDER BY position"


@pytest.fixture
def ledger(db):
    """rest0..rest9 unscheduled; soon/later scheduled ahead; late overdue; broken set
    aside; flaky owed a retry; busy RUNNING; paused paused."""
    make_workers(db, 10, "rest")
    for w in ("soon", "later", "late", "broken", "paused", "flaky", "busy"):
        make_worker(db, w)
    run_id = scheduled_run(db, "flaky")
    _, token, *_ = claim(db, workers=["flaky"])
    finish(db, run_id, token, "FAILED", "disk full")
    for w in ("soon", "later", "late", "broken", "paused"):
        put_schedule(db, w, "0 2 * * *", "UTC", enabled=w != "paused")
    tick(db, only=["soon", "later", "late", "broken"])  # arm them
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = CASE worker_name"
        " WHEN 'soon' THEN now() + interval '1 hour' WHEN 'later' THEN now() + interval '2 hours'"
        " WHEN 'late' THEN now() - interval '1 hour' ELSE next_run_at END"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET arm_error = 'bad zone', arm_error_since = now(),"
        " arm_retry_at = now() + interval '1 hour' WHERE worker_name = 'broken'"
    )
    db.execute("SELECT scrinalia.enqueue('busy', '{}', 'CLI', 'test')")
    claim(db, workers=["busy"])
    return db


def test_focus_orders_by_concern_then_the_rest_by_name(ledger):
    got = [r[1:] for r in ledger.execute(FOCUS, (100,)).fetchall()]
    # flaky's schedule: armed and ahead, but its owed retry comes first
    assert got[:6] == [
        ("overdue", "late"),
        ("set aside", "broken"),
        ("retry owed", "flaky"),
        ("running", "busy"),
        ("next", "soon"),
        ("next", "later"),
    ]
    assert got[6:] == [("other", n) for n in ["paused"] + [f"rest{i:05d}" for i in range(10)]]
    assert [r[0] for r in ledger.execute(FOCUS, (100,)).fetchall()] == list(range(1, 18))
    # a smaller page is the start of the same order, whichever concern it ends in
    for n in (1, 3, 5, 7, 12):
        assert [r[1:] for r in ledger.execute(FOCUS, (n,)).fetchall()] == got[:n]


def test_totals_count_on_the_server(ledger):
    row = ledger.execute("SELECT * FROM scrinalia.agenda_totals()").fetchone()
    names = [c.name for c in ledger.execute("SELECT * FROM scrinalia.agenda_totals()").description]
    t = dict(zip(names, row))
    assert t == {
        "workers": 17,
        "scheduled": 6,
        "paused": 1,
        "awaiting_arm": 0,
        "overdue": 1,
        "set_aside": 1,
        "overrunning": 0,
        "retry_owed": 1,
        "starved": 0,
        "unclaimed": 0,
        "running": 1,
        "queued": 0,
    }


def test_busiest_queues_and_their_totals(db):
    make_workers(db, 5, "q")
    db.execute("SELECT scrinalia.add_units('q00003', ARRAY['a', 'b', 'c'])")
    db.execute("SELECT scrinalia.add_units('q00001', ARRAY['a', 'b'])")
    db.execute("SELECT scrinalia.mark_units_processed('q00001', ARRAY['a', 'b'])")
    db.execute("SELECT scrinalia.add_units('q00004', ARRAY['a'])")
    busiest = "SELECT worker_name, pending, processed FROM scrinalia.busiest_queues(%s)"
    assert db.execute(busiest, (10,)).fetchall() == [
        ("q00003", 3, 0),
        ("q00004", 1, 0),
        ("q00001", 0, 2),
        ("q00000", 0, 0),
        ("q00002", 0, 0),
    ]
    assert db.execute(busiest, (2,)).fetchall() == [("q00003", 3, 0), ("q00004", 1, 0)]
    assert db.execute("SELECT * FROM scrinalia.queue_totals()").fetchone() == (3, 4, 2)


@pytest.mark.parametrize("fn", ["agenda_focus", "busiest_queues"])
@pytest.mark.parametrize("limit", [0, -1, None])
def test_a_page_of_no_rows_is_refused(db, fn, limit):
    with raises_sqlstate("22023", "p_limit must be 1 or more"):
        db.execute(f"SELECT * FROM scrinalia.{fn}(%s::integer)", (limit,))


def test_the_reader_may_call_them(ledger, connect_as):
    c = connect_as("reader")
    assert c.execute("SELECT workers FROM scrinalia.agenda_totals()").fetchone() == (17,)
    assert c.execute(FOCUS, (1,)).fetchall() == [(1, "overdue", "late")]
    assert c.execute("SELECT count(*) FROM scrinalia.busiest_queues(5)").fetchone() == (5,)
    assert c.execute("SELECT pending FROM scrinalia.queue_totals()").fetchone() == (0,)
