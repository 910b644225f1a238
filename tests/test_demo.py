"""The demo against the test's database: its narrative and its ledger."""

from __future__ import annotations

import io

from scrinalia_workers import demo


def test_demo_shows_enqueue_skip_catch_up_failure_and_retry(db, db_dsn, monkeypatch):
    monkeypatch.setenv("SCRINALIA_DEMO_SLOW", "2")
    out = io.StringIO()
    assert demo.run(duration=8, dsn=db_dsn, out=out) == 0
    text = out.getvalue()
    for fragment in ("lock acquired", "enqueued worker=thumbnails", "skipped worker=ocr",
                     "catch-up worker=reindex", "retry created", "moves its not_before to now",
                     "demo finished"):
        assert fragment in text, f"{fragment!r} not in the demo's output:\n{text}"
    runs = db.execute("SELECT worker_name, status::text, attempt, retry_of IS NOT NULL"
                      " FROM scrinalia.archive_worker_runs ORDER BY run_id").fetchall()
    assert ("export", "FAILED", 1, False) in runs
    assert ("export", "SUCCEEDED", 2, True) in runs
    # the catch-up is one run for three missed nights, not a replay
    assert [r for r in runs if r[0] == "reindex"] == [("reindex", "SUCCEEDED", 1, False)]
    assert db.execute("SELECT last_skipped_at IS NOT NULL FROM scrinalia.archive_worker_schedules"
                      " WHERE worker_name = 'ocr'").fetchone()[0]
    assert not db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0]
