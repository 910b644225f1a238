"""Issue 12, schedule writes: put_schedules (the bulk form) is put_schedule applied to many
schedules at once, as strict and all or nothing; validate_timezone's fast path keeps
exactly the rule of the pg_timezone_names scan."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import make_worker, make_workers, raises_sqlstate, waiting_on_a_lock
from scrinalia_workers.testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

COLUMNS = (
    "worker_name, enabled, cron, timezone, request, next_run_at, updated_by, updated_by_user_id, "
    "arm_error, arm_error_since, arm_retry_at, last_enqueued_at"
)
WORKERS = ("ocr", "thumbs", "index", "mail", "audit")


def rows(db):
    return db.execute(f"SELECT {COLUMNS} FROM scrinalia.archive_worker_schedules ORDER BY worker_name").fetchall()


def bulk(db, schedules, by="test", user_id=None):
    return db.execute(
        "SELECT created, replaced FROM scrinalia.put_schedules(%s, %s, %s)",
        (Jsonb(schedules) if schedules is not None else None, by, user_id),
    ).fetchone()


_UNSET = object()


def single(db, s: dict, by="test", user_id=None):
    """put_schedule with the element's keys as arguments; a key left out is an argument left out."""
    args = {
        "p_worker_name": s.get("worker_name"),
        "p_cron": s.get("cron"),
        "p_updated_by": by,
        "p_updated_by_user_id": user_id,
    }
    for key, arg in (("timezone", "p_timezone"), ("request", "p_request"), ("enabled", "p_enabled")):
        if key in s:
            args[arg] = Jsonb(s[key]) if key == "request" and s[key] is not None else s[key]
    names = ", ".join(f"{k} => %({k})s" for k in args)
    return db.execute(f"SELECT * FROM scrinalia.put_schedule({names})", args).fetchone()


def setup_workers(db):
    for w in WORKERS:
        make_worker(db, w)
    db.execute("SELECT scrinalia.set_default_timezone('Europe/Lisbon')")


def arm_all(db):
    """What the scheduler leaves behind: armed schedules, one with an arm error."""
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = timestamptz '2030-01-01 00:00Z', "
        "last_enqueued_at = timestamptz '2029-12-31 00:00Z'"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET arm_error = 'boom', arm_error_since = now(), "
        "arm_retry_at = now() WHERE worker_name = 'index'"
    )


FIRST = [
    {
        "worker_name": "ocr",
        "cron": "0   2 * *  MON-FRI",
        "timezone": "America/Sao_Paulo",
        "request": {"options": {"lang": "eng"}},
    },
    {"worker_name": "thumbs", "cron": "*/15 * * * *"},  # the default zone, '{}', enabled
    {"worker_name": "index", "cron": "0 3 * * *", "timezone": None, "request": None},  # NULL: the defaults
    {"worker_name": "mail", "cron": "\t5 4 * * *\t", "enabled": False},
]
# each case of put_schedule's next_run_at rule, from the state FIRST + arm_all leaves
SECOND = [
    {
        "worker_name": "ocr",
        "cron": "0 2 * * MON-FRI",
        "timezone": "America/Sao_Paulo",
        "request": {"preset": "fast"},
    },  # only the request: next_run_at kept
    {"worker_name": "thumbs", "cron": "*/20 * * * *"},  # a new cron: cleared
    {"worker_name": "index", "cron": "0 3 * * *", "timezone": "Asia/Tokyo"},  # a new zone: cleared
    {"worker_name": "mail", "cron": "5 4 * * *"},  # re-enabled: cleared
    {"worker_name": "audit", "cron": "0 0 1 * *", "enabled": False},  # new and disabled
]


def test_bulk_writes_the_rows_of_as_many_single_puts(db):
    setup_workers(db)
    for s in FIRST:
        single(db, s, user_id=7)
    arm_all(db)
    for s in SECOND:
        single(db, s, user_id=8)
    by_singles = rows(db)
    db.execute("TRUNCATE scrinalia.archive_worker_schedules")

    assert bulk(db, FIRST, user_id=7) == (4, 0)
    arm_all(db)
    assert bulk(db, SECOND, user_id=8) == (1, 4)
    assert rows(db) == by_singles
    got = {r[0]: r for r in by_singles}
    assert got["ocr"][2] == "0 2 * * MON-FRI" and got["ocr"][5] is not None  # normalised; kept
    assert all(got[w][5] is None for w in ("thumbs", "index", "mail", "audit"))
    assert got["index"][8:11] == (None, None, None)  # the arm error is cleared
    assert got["thumbs"][3] == "Europe/Lisbon"  # the default zone


def test_bulk_sends_one_notify_per_call_and_none_when_nothing_is_written(db, db_dsn):
    setup_workers(db)
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_scheduler")
        bulk(db, FIRST)
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == ["scrinalia_scheduler"]
        bulk(db, [])
        with raises_sqlstate("SW003"):
            bulk(db, [{"worker_name": "ocr", "cron": "nope"}])
        bulk(db, SECOND)
        # the next notification is SECOND's: nothing from the empty call or the refused one
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.payload for n in got] == ["schedule"]
        assert list(listener.notifies(timeout=0.3)) == []


def test_null_and_empty_batches(db):
    setup_workers(db)
    assert bulk(db, []) == (0, 0)
    assert rows(db) == []
    with raises_sqlstate("SW002", "must be a JSON array", "NULL"):
        bulk(db, None)
    for not_array in ({"worker_name": "ocr", "cron": "0 2 * * *"}, "x", 3):
        with raises_sqlstate("SW002", "must be a JSON array"):
            bulk(db, not_array)
    with raises_sqlstate("SW002", "updated_by is 201 characters long"):
        bulk(db, FIRST, by="x" * 201)
    assert rows(db) == []


# Each element that put_schedule refuses, placed third of four: the bulk error is put_schedule's
# own (SQLSTATE, message, hint), prefixed with the element and its worker.
BAD = {
    "unknown worker": ({"worker_name": "ghost", "cron": "0 2 * * *"}, "SW001"),
    "no worker": ({"cron": "0 2 * * *"}, "SW001"),
    "null worker": ({"worker_name": None, "cron": "0 2 * * *"}, "SW001"),
    "bad cron": ({"worker_name": "index", "cron": "0 24 * * *"}, "SW003"),
    "no cron": ({"worker_name": "index"}, "SW003"),
    "macro": ({"worker_name": "index", "cron": "@daily"}, "SW003"),
    "bad zone": ({"worker_name": "index", "cron": "0 2 * * *", "timezone": "europe/berlin"}, "SW004"),
    "posix zone": ({"worker_name": "index", "cron": "0 2 * * *", "timezone": "posix/UTC"}, "SW004"),
    "empty zone": ({"worker_name": "index", "cron": "0 2 * * *", "timezone": ""}, "SW004"),
    "bad request": ({"worker_name": "index", "cron": "0 2 * * *", "request": {"preset": "nope"}}, "SW002"),
    "request not an object": ({"worker_name": "index", "cron": "0 2 * * *", "request": [1]}, "SW002"),
    "bad option": ({"worker_name": "index", "cron": "0 2 * * *", "request": {"options": {"dpi": "x"}}}, "SW002"),
    "null enabled": ({"worker_name": "index", "cron": "0 2 * * *", "enabled": None}, "SW002"),
}
# Refused by the bulk form's own shape check (put_schedule's typed arguments cannot carry them).
BAD_SHAPE = {
    "not an object": (["index", "0 2 * * *"], "a schedule must be a JSON object, got array"),
    "unknown key": ({"worker_name": "index", "cron": "0 2 * * *", "timezome": "UTC"}, "unknown key 'timezome'"),
    "worker not a string": ({"worker_name": 3, "cron": "0 2 * * *"}, "worker_name must be a string, got number"),
    "cron not a string": ({"worker_name": "index", "cron": 5}, "cron must be a string, got number"),
    "zone not a string": ({"worker_name": "index", "cron": "0 2 * * *", "timezone": {}}, "timezone must be a string"),
    "enabled not a boolean": (
        {"worker_name": "index", "cron": "0 2 * * *", "enabled": "yes"},
        "enabled must be true or false, got string",
    ),
}


def batch_with(bad):
    return [
        {"worker_name": "ocr", "cron": "0 1 * * *"},
        {"worker_name": "thumbs", "cron": "0 1 * * *"},
        bad,
        {"worker_name": "mail", "cron": "0 1 * * *"},
    ]


@pytest.mark.parametrize("case", sorted(BAD))
def test_an_element_put_schedule_refuses_writes_nothing_and_is_named(db, case):
    bad, sqlstate = BAD[case]
    setup_workers(db)
    bulk(db, [{"worker_name": "ocr", "cron": "0 5 * * *"}])  # a schedule that must stay as it is
    before = rows(db)
    with pytest.raises(psycopg.Error) as single_error:
        single(db, bad)
    with pytest.raises(psycopg.Error) as bulk_error:
        bulk(db, batch_with(bad))
    s, b = single_error.value, bulk_error.value
    assert s.sqlstate == b.sqlstate == sqlstate
    worker = f" (worker '{bad['worker_name']}')" if bad.get("worker_name") else ""
    assert b.diag.message_primary == f"schedule #3{worker}: {s.diag.message_primary}"
    assert b.diag.message_hint == s.diag.message_hint
    assert rows(db) == before


@pytest.mark.parametrize("case", sorted(BAD_SHAPE))
def test_a_malformed_element_writes_nothing_and_is_named(db, case):
    bad, message = BAD_SHAPE[case]
    setup_workers(db)
    with raises_sqlstate("SW002", "schedule #3", message):
        bulk(db, batch_with(bad))
    assert rows(db) == []


def test_a_worker_named_twice_is_refused(db):
    setup_workers(db)
    with raises_sqlstate("SW002", "schedule #5: worker 'thumbs' is named twice (schedules #2 and #5)"):
        bulk(
            db,
            batch_with({"worker_name": "index", "cron": "0 2 * * *"})
            + [{"worker_name": "thumbs", "cron": "0 9 * * *"}],
        )
    assert rows(db) == []


def test_the_first_failing_check_names_its_first_element(db):
    # put_schedule's order over the batch: the unknown worker of #4 before the bad cron of #2,
    # and among bad crons the first element
    setup_workers(db)
    batch = [
        {"worker_name": "ocr", "cron": "0 1 * * *"},
        {"worker_name": "thumbs", "cron": "0 99 * * *"},
        {"worker_name": "index", "cron": "0 98 * * *"},
        {"worker_name": "ghost", "cron": "0 1 * * *"},
    ]
    with raises_sqlstate("SW001", "schedule #4 (worker 'ghost'): unknown worker 'ghost'"):
        bulk(db, batch)
    with raises_sqlstate("SW003", "schedule #2 (worker 'thumbs')", "99 is out of range"):
        bulk(db, batch[:3])
    # the same bad cron on two elements is checked once, and named at its first
    batch[2]["cron"] = "0 99 * * *"
    with raises_sqlstate("SW003", "schedule #2 (worker 'thumbs')"):
        bulk(db, batch[:3])


def test_requests_are_checked_per_worker(db):
    # the same request is valid for one worker and not for another: validated per worker
    make_worker(db, "ocr")
    make_worker(db, "plain", {"engines": {}, "presets": {}, "options": {}, "default_config": {}})
    req = {"options": {"dpi": 300}}
    with raises_sqlstate("SW002", "schedule #2 (worker 'plain')", "unknown options key 'dpi'"):
        bulk(
            db,
            [
                {"worker_name": "ocr", "cron": "0 1 * * *", "request": req},
                {"worker_name": "plain", "cron": "0 1 * * *", "request": req},
            ],
        )
    assert rows(db) == []


def test_who_may_write_in_bulk_is_who_may_put_one(db, connect_as):
    for group in ("reader", "operator", "runner", "scheduler"):
        may = db.execute(
            "SELECT has_function_privilege(%s, 'scrinalia.put_schedule(text, text, text, jsonb, boolean, text, bigint)',"
            " 'EXECUTE'), has_function_privilege(%s, 'scrinalia.put_schedules(jsonb, text, bigint)', 'EXECUTE')",
            (f"scrinalia_{group}", f"scrinalia_{group}"),
        ).fetchone()
        assert may[0] == may[1], group
    make_worker(db, "ocr")
    schedules = Jsonb([{"worker_name": "ocr", "cron": "0 2 * * *"}])
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        connect_as("reader").execute("SELECT scrinalia.put_schedules(%s)", (schedules,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        connect_as("nobody").execute("SELECT scrinalia.put_schedules(%s)", (schedules,))
    assert connect_as("operator").execute(
        "SELECT created FROM scrinalia.put_schedules(%s, 'alice')", (schedules,)
    ).fetchone() == (1,)
    assert db.execute("SELECT updated_by FROM scrinalia.archive_worker_schedules").fetchone() == ("alice",)


# --- crons: validated per distinct field, decided exactly as validate_cron decides -------

VERDICTS_FN = """
CREATE FUNCTION pg_temp.cron_verdicts(exprs text[])
RETURNS TABLE (i int, single text, bulk text)
LANGUAGE plpgsql AS $$
BEGIN
    FOR k IN 1..cardinality(exprs) LOOP
        i := k;
        BEGIN
            PERFORM scrinalia.validate_cron(exprs[k]);
            single := 'ok';
        EXCEPTION WHEN OTHERS THEN
            single := SQLSTATE || ' ' || SQLERRM;
        END;
        BEGIN
            PERFORM scrinalia.put_schedules(jsonb_build_array(jsonb_build_object('worker_name', 'w00000',
                                                                                 'cron', exprs[k])));
            bulk := 'ok';
        EXCEPTION WHEN OTHERS THEN
            bulk := SQLSTATE || ' ' || replace(SQLERRM, 'schedule #1 (worker ''w00000''): ', '');
        END;
        RETURN NEXT;
    END LOOP;
END $$
"""


def test_the_per_field_cron_check_decides_as_validate_cron(db):
    from cron_corpus import generated, hand_written

    make_workers(db, 1)
    exprs = [e for e in hand_written() + generated(3000) if e is not None and "\x00" not in e]
    db.execute(VERDICTS_FN)
    got = db.execute("SELECT i, single, bulk FROM pg_temp.cron_verdicts(%s)", (exprs,)).fetchall()
    assert len(got) == len(exprs)
    valid = [exprs[i - 1] for i, single, _ in got if single == "ok"]
    assert 1000 < len(valid) < len(exprs) - 1000
    differ = [(exprs[i - 1], single, bulk) for i, single, bulk in got if single != bulk]
    assert differ == []
    # and all the valid ones at once, each on its own worker: the per-field path accepts them
    names = make_workers(db, len(valid), prefix="v")
    assert bulk(db, [{"worker_name": n, "cron": c} for n, c in zip(names, valid)]) == (len(valid), 0)


# --- validate_timezone: the list taken at install and the scan agree ---------------------

TRICKY = [
    "europe/berlin",
    "EUROPE/BERLIN",
    "Europe/Berlin ",
    " Europe/Berlin",
    "Europe/Berlin\n",
    "Europe//Berlin",
    "Europe/Berlin/",
    "Europe/../Europe/Berlin",
    "./UTC",
    "../etc/passwd",
    "/usr/share/zoneinfo/UTC",
    "posix/Europe/Berlin",
    "right/UTC",
    "posixrules",
    "localtime",
    "Factory",
    "UTC+3",
    "utc",
    "<+03>-3",
    "EST5EDT,M3.2.0,M11.1.0",
    "FOO+3",
    "-3",
    "+01:00",
    "PST",
    "CEST",
    ":UTC",
    "zulu",
    "Etc/GMT+3",
    "Etc/GMT+13",
    "GMT+0",
    "",
    "x" * 65,
    "Europe/" + "B" * 60,
    "Europe/Nowhere",
    "zone.tab",
    "tzdata.zi",
    "leapseconds",
    "iso3166.tab",
    "Europe",
    "America",
    "UTC\x01",
    "Ñ/Ñ",
]


def scan_rule(db, names):
    """The rule as it was before issue 12, spelt with the scan."""
    return {
        r[0]: r[1]
        for r in db.execute(
            "SELECT n, n IS NOT NULL AND n <> '' AND length(n) <= 64 AND n !~ '^(posix|right)/'"
            " AND n NOT IN ('localtime', 'posixrules', 'Factory')"
            " AND EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = n)"
            " FROM unnest(%s::text[]) n",
            (names,),
        )
    }


def fast_rule(db, names):
    got = {}
    for n in names:
        try:
            with db.transaction():
                assert db.execute("SELECT scrinalia.validate_timezone(%s)", (n,)).fetchone()[0] == n
            got[n] = True
        except psycopg.Error as e:
            assert e.sqlstate == "SW004", (n, e)
            got[n] = False
    return got


def test_the_fast_timezone_rule_is_the_scan(db):
    listed = [r[0] for r in db.execute("SELECT name FROM pg_timezone_names ORDER BY name")]
    assert len(listed) > 400
    names = listed + TRICKY + [n.upper() for n in listed[::40]] + [n.lower() for n in listed[::30]]
    names = [n for n in names if "\x00" not in n]
    want = scan_rule(db, names)
    assert sum(want.values()) > 400 and not all(want.values())
    assert fast_rule(db, names) == want
    with raises_sqlstate("SW004", "NULL"):
        db.execute("SELECT scrinalia.validate_timezone(NULL)")


def reinstall_validate_timezone(db, list_from: str):
    """Re-runs sql/40_schedules.sql's install of validate_timezone with another list: what a
    tzdata upgrade after the last migrate looks like to it."""
    text = (ROOT / "sql" / "40_schedules.sql").read_text()
    block = re.search(r"^DO \$install\$.*?^END \$install\$;", text, re.S | re.M).group(0)
    assert block.count("FROM pg_catalog.pg_timezone_names z") == 1
    db.execute(block.replace("FROM pg_catalog.pg_timezone_names z", f"FROM ({list_from}) z"))


def test_a_zone_added_after_the_install_is_found_by_the_scan(db):
    reinstall_validate_timezone(db, "SELECT name FROM pg_catalog.pg_timezone_names WHERE name <> 'Asia/Tokyo'")
    assert (
        "'Asia/Tokyo'" not in db.execute("SELECT prosrc FROM pg_proc WHERE proname = 'validate_timezone'").fetchone()[0]
    )
    assert db.execute("SELECT scrinalia.validate_timezone('Asia/Tokyo')").fetchone()[0] == "Asia/Tokyo"
    with raises_sqlstate("SW004"):
        db.execute("SELECT scrinalia.validate_timezone('asia/tokyo')")


def test_a_listed_zone_that_no_longer_loads_is_refused(db):
    # what the list holds when a tzdata upgrade removed a zone after the last migrate
    reinstall_validate_timezone(
        db, "SELECT name FROM pg_catalog.pg_timezone_names UNION ALL SELECT 'Mars/Olympus_Mons'"
    )
    src = db.execute("SELECT prosrc FROM pg_proc WHERE proname = 'validate_timezone'").fetchone()[0]
    assert "Mars/Olympus_Mons" in src and "Europe/Berlin" in src
    with raises_sqlstate("SW004", "'Mars/Olympus_Mons'"):
        db.execute("SELECT scrinalia.validate_timezone('Mars/Olympus_Mons')")
    assert db.execute("SELECT scrinalia.validate_timezone('Europe/Berlin')").fetchone()[0] == "Europe/Berlin"


# --- the benchmark checks what it measured ------------------------------------------------


@pytest.mark.slow
def test_quick_schedule_bench_checks_its_rows(db_dsn):
    from bench import schedule_bench
    from bench.common import InvariantError

    r = schedule_bench.run(db_dsn, quick=True)
    assert r.data["single"]["n"] == 300 and len(r.data["single"]["new"]) == 3
    assert [(b["n"], b["all_distinct"]) for b in r.data["bulk"]] == [(1_000, False), (5_000, False), (1_000, True)]
    assert r.data["bulk"][2]["distinct_crons"] == 1_000
    assert all(x > 0 for b in r.data["bulk"] for x in b["new"] + b["update"])
    with schedule_bench.conn(db_dsn) as c:
        specs = [schedule_bench.spec(i) for i in range(50)]
        seconds, split = schedule_bench.bulk(c, specs)
        assert split == (50, 0) and seconds > 0
        schedule_bench.verify(c, specs, "bulk")
        with pytest.raises(InvariantError, match="differ"):
            schedule_bench.verify(c, [schedule_bench.spec(i, variant=1) for i in range(50)], "bulk")
        with pytest.raises(InvariantError, match="49 written"):
            schedule_bench.verify(c, specs[:49], "bulk")
    json.dumps(r.data)  # the raw figures stay plain data


# --- two batches at once -------------------------------------------------------------------


def wait_until_blocked(db, pid: int, deadline_s: float = 10.0) -> None:
    wait_for(
        lambda: waiting_on_a_lock(db, pid),
        timeout=deadline_s,
        interval=0.01,
        what=f"backend {pid} waiting for a lock",
    )


def test_concurrent_batches_lock_in_worker_order_and_cannot_deadlock(db, db_dsn):
    # B lists w00001 before w00000; were rows locked in the list's order, B would hold
    # w00001 while it waits for A's w00000, and A's next write of w00001 would deadlock
    import threading

    make_workers(db, 2)
    bulk(db, [{"worker_name": "w00000", "cron": "0 1 * * *"}, {"worker_name": "w00001", "cron": "0 1 * * *"}])
    with psycopg.connect(db_dsn) as a, psycopg.connect(db_dsn, autocommit=True) as b:
        a.execute("SET deadlock_timeout = '100ms'")
        bulk(a, [{"worker_name": "w00000", "cron": "0 2 * * *"}])  # A's open transaction holds w00000
        failures = []

        def batch_b():
            try:
                bulk(
                    b, [{"worker_name": "w00001", "cron": "0 3 * * *"}, {"worker_name": "w00000", "cron": "0 3 * * *"}]
                )
            except psycopg.Error as e:
                failures.append(e)

        t = threading.Thread(target=batch_b)
        t.start()
        wait_until_blocked(db, b.info.backend_pid)
        bulk(a, [{"worker_name": "w00001", "cron": "0 2 * * *"}])  # free: B waits before taking it
        a.commit()
        t.join(timeout=10)
        assert not t.is_alive() and failures == []
    assert db.execute("SELECT array_agg(cron ORDER BY worker_name) FROM scrinalia.archive_worker_schedules").fetchone()[
        0
    ] == ["0 3 * * *", "0 3 * * *"]
