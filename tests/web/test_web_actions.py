"""The web view writes nothing unless told: no form and no POST without --allow-actions
and an operator login; with them, each action needs this process's token and the page's
own Origin, and does what the CLI does (the ledger shows it). Re-run is offered only
where the database has scrinalia.rerun."""

from __future__ import annotations

import re

from webview import login_dsn

TOKEN = re.compile(r'name="csrf" value="([^"]+)"')


def _paused(db, worker: str) -> bool:
    return db.execute(
        "SELECT NOT enabled FROM scrinalia.archive_worker_schedules WHERE worker_name = %s", (worker,)
    ).fetchone()[0]


def test_no_action_without_the_flag(ledger, db, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["operator"]))
    for path in ("/", "/runs", "/worker?name=ocr"):
        body = w.get(path).body
        assert "<form" not in body and "read-only" in body, path
    a = w.post({"action": "pause", "worker": "ocr", "csrf": "anything"})
    assert a.status == 403 and "takes no actions" in a.body
    assert not _paused(db, "ocr")
    assert "may write, but the view writes nothing without --allow-actions" in w.log()


def test_no_action_for_a_reader_even_with_the_flag(ledger, db, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]), "--allow-actions")
    assert "<form" not in w.get("/").body
    assert "this login (a reader) may not act, so no action is offered" in w.log()
    assert w.post({"action": "pause", "worker": "ocr", "csrf": "x"}).status == 403
    assert not _paused(db, "ocr")


def test_an_action_needs_the_token_and_the_origin(ledger, db, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["operator"]), "--allow-actions")
    page = w.get("/").body
    assert "actions enabled" in page
    token = TOKEN.search(page).group(1)
    pause = {"action": "pause", "worker": "ocr"}
    refused = [
        w.post(pause),  # no token
        w.post({**pause, "csrf": token[:-1] + ("A" if token[-1] != "A" else "B")}),  # a wrong one
        w.post({**pause, "csrf": token}, headers={"Origin": "http://attacker.example"}),  # a foreign page
        w.post({**pause, "csrf": token}, headers={"Origin": ""}),  # none said
    ]
    assert [a.status for a in refused] == [403, 403, 403, 403], [a.body for a in refused]
    assert "token" in refused[0].body and "Origin" in refused[2].body
    assert not _paused(db, "ocr")
    assert w.get("/action").status == 404  # GET never acts

    done = w.post({**pause, "csrf": token})
    assert done.status == 200 and "paused the schedule of ocr" in done.body
    assert _paused(db, "ocr")
    by = db.execute("SELECT updated_by FROM scrinalia.archive_worker_schedules WHERE worker_name = 'ocr'").fetchone()
    assert by[0].startswith("web:")
    assert w.post({"action": "resume", "worker": "ocr", "csrf": token}).status == 200
    assert not _paused(db, "ocr")


def test_enqueue_and_cancel_do_what_the_cli_does(ledger, db, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["operator"]), "--allow-actions")
    token = TOKEN.search(w.get("/").body).group(1)
    busy = w.post({"action": "enqueue", "worker": "thumbs", "csrf": token})  # its slot holds a queued run
    assert busy.status == 409 and "SW010" in busy.body
    gone = w.post({"action": "cancel", "run": str(ledger["queued"]), "csrf": token})
    assert gone.status == 200 and f"cancelled run #{ledger['queued']}" in gone.body
    status = db.execute("SELECT status FROM scrinalia.archive_worker_runs WHERE run_id = %s", (ledger["queued"],))
    assert status.fetchone()[0] == "CANCELLED"
    made = w.post({"action": "enqueue", "worker": "thumbs", "csrf": token})
    assert made.status == 200 and "enqueued a manual run of thumbs: run #" in made.body
    assert w.post({"action": "cancel", "run": "1; DROP", "csrf": token}).status == 400
    assert w.post({"action": "drop", "worker": "ocr", "csrf": token}).status == 400


def test_rerun_is_offered_only_where_the_database_has_it(ledger, db, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["operator"]), "--allow-actions")
    token = TOKEN.search(w.get("/").body).group(1)
    assert 'value="rerun"' in w.get("/runs").body
    done = w.post({"action": "rerun", "run": str(ledger["chain_last"]), "csrf": token})
    assert done.status == 200 and f"re-ran run #{ledger['chain_last']}: run #" in done.body
    made = db.execute(
        "SELECT trigger FROM scrinalia.worker_run_history WHERE rerun_of = %s", (ledger["chain_last"],)
    ).fetchall()
    assert made == [("MANUAL",)]

    # an earlier release's database, without re-run: not offered, and refused if posted
    db.execute("DROP FUNCTION scrinalia.rerun(bigint, text)")
    w = start_web(login_dsn(db_dsn, role_logins["operator"]), "--allow-actions")
    token = TOKEN.search(w.get("/").body).group(1)
    runs = w.get("/runs").body
    assert 'value="rerun"' not in runs and "actions enabled" in runs
    assert w.post({"action": "rerun", "run": str(ledger["chain_last"]), "csrf": token}).status == 400
