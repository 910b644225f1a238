"""The day-of-month/day-of-week rule (Vixie cron: when both fields are restricted
either one selects a day; when either starts with '*', '*/2' included, both must)
is decided the same way by every reader of a cron: the shim's next_occurrence, the
SQL matcher cron_masks_match on cron_masks, cron_fires_at, the tick's check of a next
instant, its catch-up check cron_fires_between, and the previews. And the matcher is
inlined where it is called, not called per instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from test_cron_fires_at import occurrences
from test_cron_masks import tick_cases

from helpers import make_workers
from scrinalia_workers.cron import next_occurrence

# (cron, day_and): restricted day fields ORed; a day field starting with '*' ANDs them
CRONS = [
    ("0 12 13 * FRI", False),  # every 13th and every Friday
    ("0 12 1-7 * MON", False),  # the first seven days and every Monday
    ("0 12 */2 * FRI", True),  # Fridays on odd days
    ("0 12 13 * */2", True),  # the 13th when it falls on SUN, TUE, THU or SAT
    ("0 12 13 * *", True),
    ("0 12 * * FRI", True),
]
ZONE = "America/New_York"
START = datetime(2031, 7, 1, tzinfo=UTC)  # ahead of any test run: the tick takes only future instants
DAYS = 120


def noons() -> list[datetime]:
    """Noon on the zone's wall clock, each day of the window: every day the rule may pick."""
    first = next_occurrence("0 12 * * *", ZONE, START)
    return [first + timedelta(days=d) for d in range(DAYS)]  # (no DST change in July-October)


def test_the_rule_as_the_shim_reads_it():
    fires = occurrences("0 12 13 * FRI", "UTC", datetime(2031, 6, 1, tzinfo=UTC), datetime(2031, 6, 30, tzinfo=UTC))
    # Fridays 6, 13 (a Friday the 13th once), 20, 27: the 13th and the Fridays
    assert sorted(t.day for t in fires) == [6, 13, 20, 27]
    fires = occurrences("0 12 */2 * FRI", "UTC", datetime(2031, 6, 1, tzinfo=UTC), datetime(2031, 6, 30, tzinfo=UTC))
    assert sorted(t.day for t in fires) == [13, 27]  # the odd-day Fridays only


def test_the_matcher_and_cron_fires_at_agree_with_the_shim(db):
    days = noons()
    wrong = []
    for cron, day_and in CRONS:
        want = occurrences(cron, ZONE, days[0] - timedelta(minutes=1), days[-1])
        assert 0 < len(want) < len(days), cron
        assert db.execute("SELECT day_and FROM scrinalia.cron_masks(%s)", (cron,)).fetchone()[0] is day_and
        rows = db.execute(
            "SELECT t, scrinalia.cron_masks_match(m.minutes, m.hours, m.doms, m.months, m.dows, m.day_and,"
            "                                     timezone(%s, t)),"
            "       scrinalia.cron_fires_at(%s, %s, t)"
            "  FROM scrinalia.cron_masks(%s) m, unnest(%s::timestamptz[]) t ORDER BY t",
            (ZONE, cron, ZONE, cron, days),
        ).fetchall()
        wrong += [(cron, t, m, f) for t, m, f in rows if not m == f == (t in want)]
    assert wrong == []


def test_the_tick_decides_the_rule_as_the_shim(db):
    days = noons()
    cases = [(cron, ZONE, t) for cron, _ in CRONS for t in days]
    n, refused, _ = tick_cases(db, cases)  # REFUSED exactly where cron_fires_at says no
    want = sum(len(occurrences(cron, ZONE, days[0] - timedelta(minutes=1), days[-1])) for cron, _ in CRONS)
    assert n - refused == want


def test_the_catch_up_check_and_the_previews_agree_with_the_shim(db):
    days = noons()
    for cron, _ in CRONS:
        want = sorted(occurrences(cron, ZONE, days[0] - timedelta(minutes=1), days[-1]))
        got = [
            r[0]
            for r in db.execute(
                "SELECT fires_at FROM scrinalia.cron_fire_previews(%s, %s, %s, %s)",
                (cron, ZONE, days[0] - timedelta(minutes=1), len(want)),
            )
        ]
        assert got == want, cron
        # a wait over each previous noon alone: a catch-up exactly when that noon fired
        caught = db.execute(
            "SELECT array_agg(scrinalia.cron_fires_between(%s, %s, t - interval '1 day 1 minute',"
            "                                              t - interval '1 minute')"
            "                 ORDER BY t)"
            "  FROM unnest(%s::timestamptz[]) t",
            (cron, ZONE, days[1:]),
        ).fetchone()[0]
        assert caught == [t - timedelta(days=1) in want for t in days[1:]], cron


def test_the_matcher_is_inlined_where_it_is_called(db):
    """cron_masks_match is one SQL expression with no SET clause: the planner writes it
    into the statement that calls it, so the tick and cron_fires_at pay bit tests, not a
    function call per instant. track_functions = 'all' counts the calls of a SQL
    function only when it was not inlined (cron_fires_between, with its SET clause, is
    counted)."""
    workers = make_workers(db, len(CRONS), prefix="inl")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, c, %s, now() - interval '2 hours' FROM unnest(%s::text[], %s::text[]) AS i(w, c)",
        (ZONE, workers, [c for c, _ in CRONS]),
    )
    db.execute("SELECT scrinalia.store_cron_masks(%s, false)", ([c for c, _ in CRONS],))
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'all'")
        due = db.execute("SELECT worker_name, cron, timezone, next_run_at, db_now FROM scrinalia.due_schedules()")
        due = due.fetchall()
        nexts = [next_occurrence(c, z, now) for _, c, z, _, now in due]
        decided = db.execute(
            "SELECT decision FROM scrinalia.tick_v2(%s::text[], %s::timestamptz[], 'test')",
            ([r[0] for r in due], nexts),
        ).fetchall()
        db.execute(
            "SELECT scrinalia.cron_fires_at('0 12 13 * FRI', %s, t) FROM unnest(%s::timestamptz[]) t", (ZONE, noons())
        ).fetchall()
        calls = dict(db.execute("SELECT funcname, calls FROM pg_stat_xact_user_functions").fetchall())
    assert sorted(d for (d,) in decided) == ["ENQUEUED"] * len(CRONS)
    assert calls.get("cron_fires_between", 0) > 0 and calls.get("cron_fires_at", 0) >= DAYS
    assert "cron_masks_match" not in calls
    plan = "\n".join(
        r[0]
        for r in db.execute(
            "EXPLAIN (VERBOSE) SELECT scrinalia.cron_masks_match(m.minutes, m.hours, m.doms, m.months, m.dows,"
            " m.day_and, t) FROM scrinalia.archive_cron_masks m, generate_series('2031-07-01'::timestamp,"
            " '2031-07-02', interval '1 minute') t"
        )
    )
    assert "cron_masks_match" not in plan and "date_part('dow'" in plan
