"""enqueue_runs() changes planner settings for its own statements only: its caller's stay as they were."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from helpers import make_worker, make_workers, raises_sqlstate


def test_the_callers_plan_cache_mode_is_the_same_after_a_batch_in_its_transaction(db):
    workers = make_workers(db, 30)
    with db.transaction():
        db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        got = db.execute("SELECT run_id FROM scrinalia.enqueue_runs(%s::text[])", (workers,)).fetchall()
        assert len(got) == 30
        assert db.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "force_generic_plan"
    assert db.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "auto"


def test_a_slot_taken_answers_slot_busy_after_the_settings_changed(db):
    ocr = make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue(%s)", (ocr,))
    others = make_workers(db, 3)
    with raises_sqlstate("SW010", "enqueue #2 (worker 'ocr')", "worker 'ocr' is busy"):
        db.execute(
            "SELECT run_id FROM scrinalia.enqueue_runs(%s::text[], %s::jsonb[])",
            ([others[0], ocr, others[1]], [Jsonb({}), Jsonb({}), Jsonb({})]),
        )
    assert db.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "auto"
