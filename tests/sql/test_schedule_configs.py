"""The config kept for the tick (schedule_configs): copied into a worker's scheduled runs
while its stamp, request and rule hold, resolved afresh and kept again when any moved,
never a stale one, and never a wait on a catalogue change under way."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import CATALOGUE, make_worker, put_schedule, run_row, set_next_run, tick, waiting_on_a_lock
from scrinalia_workers.testkit.waiting import wait_for

TAMPERED = {"kept": "by hand"}


def fresh(db, worker: str = "ocr") -> tuple[dict, dict]:
    """What resolve_config() gives the worker's schedule now."""
    return db.execute(
        "SELECT c.config, c.sources FROM scrinalia.archive_worker_schedules s,"
        " scrinalia.resolve_config(s.worker_name, s.request) c WHERE s.worker_name = %s",
        (worker,),
    ).fetchone()


def scheduled(db, worker: str = "ocr") -> dict:
    """The run the next period's tick creates (the previous one out of the slot first)."""
    db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE worker_name = %s AND status = 'QUEUED'", (worker,))
    set_next_run(db, worker, "1 minute")
    _, decisions = tick(db, only=[worker])
    ((_, decision, run_id, *_),) = decisions
    assert decision == "ENQUEUED"
    return run_row(db, run_id)


def kept(db, worker: str = "ocr") -> dict:
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM scrinalia.schedule_configs WHERE worker_name = %s", (worker,)).fetchone()


def tamper(db, worker: str = "ocr") -> None:
    """A kept config no resolution gives: a run that carries it was copied, not resolved."""
    db.execute("UPDATE scrinalia.schedule_configs SET config = %s WHERE worker_name = %s", (Jsonb(TAMPERED), worker))


@pytest.fixture
def ocr(db):
    make_worker(db, "ocr")
    put_schedule(db, "ocr", request={"options": {"lang": "eng"}})
    tick(db, only=["ocr"])  # armed
    return "ocr"


def test_the_first_run_resolves_and_keeps_its_config_the_next_copy_it(db, ocr):
    before = kept(db)
    assert before["stamp"] is None and before["layers_stamp"] is not None  # a row from registration, nothing kept
    first = scheduled(db)
    assert (first["config"], first["config_sources"]) == fresh(db)
    after = kept(db)
    assert after["stamp"] == after["layers_stamp"] == before["layers_stamp"]
    assert (after["config"], after["config_sources"], after["request"]) == (*fresh(db), {"options": {"lang": "eng"}})
    tamper(db)
    assert scheduled(db)["config"] == TAMPERED  # copied


def change_default_config(db):
    make_worker(db, "ocr", {**CATALOGUE, "default_config": {"engine": "easyocr", "options": {"dpi": 200}}})


def change_presets(db):
    make_worker(db, "ocr", {**CATALOGUE, "presets": {"fast": {"options": {"dpi": 75}}}})


def add_settings(db):
    db.execute("SELECT scrinalia.put_settings('ocr', %s)", (Jsonb({"options": {"dpi": 1200}}),))


def settings_kept(db):
    """Settings added, and a config kept under them (tampered: copied if it still holds)."""
    add_settings(db)
    scheduled(db)
    tamper(db)


def change_settings(db):
    settings_kept(db)
    db.execute("SELECT scrinalia.put_settings('ocr', %s)", (Jsonb({"options": {"dpi": 72}}),))


def delete_settings(db):
    settings_kept(db)
    db.execute("DELETE FROM scrinalia.archive_worker_settings WHERE worker_name = 'ocr'")


def truncate_settings(db):
    settings_kept(db)
    db.execute("TRUNCATE scrinalia.archive_worker_settings")


def change_request(db):
    put_schedule(db, "ocr", request={"options": {"lang": "por"}, "preset": "fast"})


def change_the_rule(db):
    # the same rule written again with a comment: another source, another rule
    src = db.execute("SELECT pg_get_functiondef('scrinalia.config_of(jsonb,jsonb,jsonb,jsonb)'::regprocedure)")
    db.execute(src.fetchone()[0].replace("BEGIN", "BEGIN -- another rule", 1))


@pytest.mark.parametrize(
    "change",
    [
        change_default_config,
        change_presets,
        add_settings,
        change_settings,
        delete_settings,
        truncate_settings,
        change_request,
        change_the_rule,
    ],
)
def test_a_change_of_a_layer_the_request_or_the_rule_resolves_afresh(db, ocr, change):
    scheduled(db)
    tamper(db)
    change(db)
    run = scheduled(db)
    assert run["config"] != TAMPERED
    assert (run["config"], run["config_sources"]) == fresh(db)
    k = kept(db)
    assert (k["config"], k["stamp"]) == (run["config"], k["layers_stamp"])  # kept again, holding
    tamper(db)
    assert scheduled(db)["config"] == TAMPERED  # and copied from then on


def test_writing_the_same_catalogue_again_keeps_the_config(db, ocr):
    """A deploy registers every worker again: what did not change keeps what was kept."""
    scheduled(db)
    tamper(db)
    stamp = kept(db)["layers_stamp"]
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.put_settings('ocr', '{}')")  # settings now, but empty: a change
    assert kept(db)["layers_stamp"] != stamp
    scheduled(db)
    tamper(db)
    stamp = kept(db)["layers_stamp"]
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.put_settings('ocr', '{}')")
    assert kept(db)["layers_stamp"] == stamp
    assert scheduled(db)["config"] == TAMPERED


def test_a_change_committed_while_a_tick_resolved_in_an_older_snapshot_is_not_hidden(db, ocr, db_dsn):
    """The tick resolves in its statement's snapshot and keeps what it resolved under the
    stamp it read there: a change committed while the statement ran renewed the stamp,
    so what was kept does not hold, and the next period resolves the new layers. (The
    statement is held mid-way by an enqueue of the same worker under way, whose slot its
    insert waits for.)"""
    scheduled(db)
    put_schedule(db, "ocr", request={"options": {"lang": "por"}})  # nothing kept holds now
    db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE worker_name = 'ocr'")
    set_next_run(db, "ocr", "1 minute")
    old = fresh(db)
    with psycopg.connect(db_dsn) as enqueuer, psycopg.connect(db_dsn, autocommit=True) as ticker:
        enqueuer.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, requested_by) VALUES ('ocr', 'MANUAL', 'x')"
        )
        pid = ticker.info.backend_pid
        with ThreadPoolExecutor(1) as pool:
            ticking = pool.submit(tick, ticker, "1 hour", ["ocr"])
            wait_for(lambda: waiting_on_a_lock(db, pid), timeout=10, what="the tick waits on the enqueue's slot")
            db.execute("SELECT scrinalia.put_settings('ocr', %s)", (Jsonb({"options": {"dpi": 1200}}),))
            enqueuer.rollback()
            _, decisions = ticking.result(timeout=30)
    run = run_row(db, decisions[0][2])
    assert run["config"] == old[0]  # its snapshot's layers
    assert kept(db)["stamp"] != kept(db)["layers_stamp"]
    new = scheduled(db)
    assert (new["config"], new["config_sources"]) == fresh(db) != old
    assert new["config"]["options"]["dpi"] == 1200


def test_a_tick_never_waits_for_a_catalogue_change_under_way(db, ocr, db_dsn):
    """A catalogue write holds the worker's row of schedule_configs until it commits: the
    tick that would keep a config there leaves it for a later tick, and its runs are
    resolved all the same."""
    scheduled(db)
    put_schedule(db, "ocr", request={"options": {"lang": "por"}})  # the tick must resolve, and would keep
    want = fresh(db)
    with psycopg.connect(db_dsn) as writer:
        writer.execute("SELECT scrinalia.put_settings('ocr', %s)", (Jsonb({"options": {"dpi": 1200}}),))
        db.execute("SET lock_timeout = '5s'")  # (a wait fails the test, not the suite)
        run = scheduled(db)
        writer.rollback()
    assert (run["config"], run["config_sources"]) == want
    assert kept(db)["request"] == {"options": {"lang": "eng"}}  # not kept: skipped
    assert scheduled(db)["config"] == want[0]
    assert kept(db)["request"] == {"options": {"lang": "por"}}  # kept by the tick after


def test_a_worker_without_a_row_is_resolved_at_every_tick(db):
    """A worker loaded with the triggers off has no stamp: nothing is kept for it until a
    migrate adds its row, and its runs are resolved."""
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")
        db.execute(
            "INSERT INTO scrinalia.archive_workers (worker_name, default_config) VALUES ('bulk', %s)",
            (Jsonb(CATALOGUE["default_config"]),),
        )
    put_schedule(db, "bulk")
    tick(db, only=["bulk"])
    assert kept(db, "bulk") is None
    run = scheduled(db, "bulk")
    assert (run["config"], run["config_sources"]) == fresh(db, "bulk")
    assert kept(db, "bulk") is None


def test_a_worker_removed_takes_its_row(db, ocr):
    scheduled(db)
    db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE worker_name = 'ocr'")
    db.execute("DELETE FROM scrinalia.archive_workers WHERE worker_name = 'ocr'")
    assert kept(db) is None
