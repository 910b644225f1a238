"""Every lease call treats an expired lease the same way: heartbeat, finish and release,
one run or a batch, write nothing for it and say (or show) that the lease is lost; the
reaper alone ends such a run."""

from __future__ import annotations

from helpers import claim, make_worker, raises_sqlstate, run_row, table_fingerprints


def _expired_claim(db):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue('ocr')")
    run_id, token, *_ = claim(db)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    return run_id, token


def test_release_runs_leaves_an_expired_lease_to_the_reaper(db):
    run_id, token = _expired_claim(db)
    before = table_fingerprints(db)
    assert db.execute("SELECT run_id FROM scrinalia.release_runs(%s, %s)", ([run_id], [token])).fetchall() == []
    assert table_fingerprints(db) == before
    # as heartbeat says: the lease is lost
    with raises_sqlstate("SW020", "lease expired"):
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    reaped = db.execute("SELECT run_id, status::text FROM scrinalia.reap_expired_leases()").fetchall()
    assert reaped == [(run_id, "INTERRUPTED")]


def test_every_lease_call_refuses_an_expired_lease_and_writes_nothing(db):
    run_id, token = _expired_claim(db)
    before = table_fingerprints(db)
    with raises_sqlstate("SW020", "lease expired"):
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    with raises_sqlstate("SW020", "lease expired"):
        db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, token))
    hb = db.execute("SELECT lease_expires_at, lost_reason FROM scrinalia.heartbeat_runs(%s, %s)", ([run_id], [token]))
    assert [(e, "lease expired" in (lost or "")) for e, lost in hb.fetchall()] == [(None, True)]
    fin = db.execute(
        "SELECT lost_reason FROM scrinalia.finish_runs(%s, %s, ARRAY['SUCCEEDED']::scrinalia.run_status[], %s, %s)",
        ([run_id], [token], [None], [None]),
    ).fetchall()
    assert "lease expired" in fin[0][0]
    assert db.execute("SELECT run_id FROM scrinalia.release_runs(%s, %s)", ([run_id], [token])).fetchall() == []
    assert table_fingerprints(db) == before


def test_release_runs_still_releases_a_live_lease(db):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue('ocr')")
    run_id, token, *_ = claim(db)
    assert db.execute("SELECT run_id FROM scrinalia.release_runs(%s, %s)", ([run_id], [token])).fetchall() == [
        (run_id,)
    ]
    assert run_row(db, run_id)["status"] == "QUEUED"
