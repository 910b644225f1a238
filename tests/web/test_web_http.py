"""The web view over HTTP (urllib against the real process on a free loopback port):
what the pages show and that it is what the terminal shows, the headers, the paging,
the logins that may not read a panel, a row that cannot render, and misconfiguration."""

from __future__ import annotations

import io
import json
import re
import socket

import pytest
from webview import CHAIN_ERRORS, login_dsn, request

from helpers import assert_one_line_error, cli, make_workers
from scrinalia_workers.logs import EventLog
from scrinalia_workers.testkit.waiting import wait_for
from scrinalia_workers.web.panels import View, table

SECURITY = {
    "Content-Security-Policy": "default-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


def _text(page: str) -> str:
    """The page's text as a person reads it (tags dropped, entities as written)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_the_overview_shows_health_alerts_agenda_and_active_runs_as_status_does(ledger, db_dsn, role_logins, start_web):
    reader = login_dsn(db_dsn, role_logins["reader"])
    w = start_web(reader)
    a = w.get("/")
    assert a.status == 200, a.body
    text = _text(a.body)
    assert "login sw_login_reader (a reader), read-only" in text
    assert "NOT HEALTHY: no scheduler holds the lock" in text
    assert "FAILED_AFTER_ALL_ATTEMPTS" in text and "ended FAILED after 3 attempt(s)" in text
    assert "read the attempts&#x27; errors (runs WORKER --timeline)" in a.body  # what to do, beside it
    for worker in ("ocr", "thumbs", "idle"):
        assert f'<a href="/worker?name={worker}">{worker}</a>' in a.body
    assert f"#{ledger['queued']} QUEUED MANUAL" in text  # thumbs' slot, in the agenda
    assert "waiting" in text and "for a runner" in text  # and in the active runs
    # the terminal and the page agree: every next run `status` prints is on the page
    status = cli("status", dsn=reader)
    assert status.code == 0, status.err
    instants = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", status.out.split("agenda", 1)[1])
    assert len(instants) >= 2
    for instant in instants:
        assert instant in text, instant
    for zoned in ("WET", "UTC"):
        assert re.search(rf"\d\d:\d\d {zoned}", text)


def test_a_workers_page_shows_its_failed_period_as_a_chain(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    a = w.get("/worker?name=ocr")
    assert a.status == 200, a.body
    text = _text(a.body)
    assert "period 2026-01-01 02:00:00Z: FAILED after 3 attempt(s)" in text
    for error in CHAIN_ERRORS:
        assert error in text
    last = ledger["chain_last"]
    assert f"retry of #{last - 1}" in text and f"retried by #{last}" in text
    assert "1/3" in text and "3/3" in text
    assert "1m10s" in text  # each retry's backoff: 2 minutes apart, the attempt before took 50 s
    runs = _text(w.get("/runs").body)
    assert f"#{last}" in runs and "gave up: disk full" in runs


def test_every_answer_carries_the_security_headers(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    for path, status in (("/", 200), ("/runs", 200), ("/style.css", 200), ("/nope", 404), ("/worker?name=x", 404)):
        a = w.get(path)
        assert a.status == status, (path, a.status)
        for header, value in SECURITY.items():
            assert value in (a.headers.get(header) or ""), (path, header, a.headers.get(header))
    assert w.get("/style.css").headers["Content-Type"].startswith("text/css")
    assert "<style" not in w.get("/").body and "<script" not in w.get("/").body


def test_a_host_name_not_ours_is_refused(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    a = w.get("/", headers={"Host": "attacker.example"})
    assert a.status == 421 and "does not answer to that Host" in a.body
    assert w.get("/", headers={"Host": "localhost:1"}).status == 200  # the loopback names, any port


def test_a_monitor_login_is_told_what_it_cannot_read(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["monitor"]))
    a = w.get("/")
    assert a.status == 200, a.body
    text = _text(a.body)
    assert "NOT HEALTHY: no scheduler holds the lock" in text  # what a monitor may read
    for what in ("the alerts", "the agenda (worker_agenda)", "the active runs (worker_run_history)"):
        assert f"this login (a monitor) cannot read {what}: grant scrinalia_reader" in text, what
    page = w.get("/worker?name=ocr")
    assert page.status == 200 and "this login (a monitor) cannot read the timeline" in _text(page.body)
    assert w.get("/runs").status == 200


def test_paging_shows_a_page_of_rows_and_links_to_the_next(db, db_dsn, role_logins, start_web):
    names = make_workers(db, 25)
    w = start_web(login_dsn(db_dsn, role_logins["reader"]), "--page-size", "10")
    first = w.get("/").body
    shown = re.findall(r'<a href="/worker\?name=(w\d+)">', first)
    assert shown == names[:10]
    more = re.search(r'<a href="(/\?after=[^"]+)">more workers', first)
    assert more, first
    second = w.get(more.group(1).replace("&amp;", "&")).body
    assert re.findall(r'<a href="/worker\?name=(w\d+)">', second) == names[10:20]


def test_an_instant_no_zone_can_hold_is_shown_as_postgresql_prints_it(ledger, db, db_dsn, role_logins, start_web):
    # written by hand, in a zone ahead of UTC: the latest datetime shifted east overflows
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET timezone = 'Asia/Tokyo', next_run_at = 'infinity'"
        " WHERE worker_name = 'ocr'"
    )
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    a = w.get("/")
    assert a.status == 200
    assert "could not be shown" not in a.body and "web_row_failed" not in w.log()
    agenda = a.body.split("<h2>Agenda</h2>", 1)[1].split("</section>", 1)[0]
    row = agenda.split('<a href="/worker?name=ocr">ocr</a>', 1)[1].split("</tr>", 1)[0]
    assert "infinity" in row


def test_a_row_that_cannot_render_is_an_error_cell_and_the_rest_renders():
    out = io.StringIO()
    view = View(conn=None, login=None, log=EventLog(json_lines=True, stream=out), actions=None, page_size=50)  # type: ignore[arg-type]

    def cells(r):
        return [r["name"], 1 / r["n"]]

    body = str(table(view, "agenda", ["worker", "share"], [{"name": "ocr", "n": 0}, {"name": "thumbs", "n": 2}], cells))
    assert "this row could not be shown (ZeroDivisionError); the log has it" in body
    assert "<td>thumbs</td>" in body and "<td>0.5</td>" in body
    (line,) = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert (line["event"], line["panel"]) == ("web_row_failed", "agenda")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--bind", "127.0.0.1"], "is not HOST:PORT"),
        (["--bind", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--bind", "::1:8080"], "in brackets"),
        (["--bind", "0.0.0.0:8080"], "pass --public"),
        (["--page-size", "5"], "out of range"),
    ],
)
def test_misconfiguration_is_one_line_and_exit_2(db_dsn, args, fragment):
    assert_one_line_error(cli("web", *args, dsn=db_dsn), 2, fragment)


def test_no_database_is_one_line_and_exit_2(empty_db_dsn):
    assert_one_line_error(cli("web"), 2, "no database configured")
    assert_one_line_error(cli("web", dsn="postgresql://nobody@127.0.0.1:1/x"), 2, "cannot connect")
    assert_one_line_error(cli("web", dsn=empty_db_dsn), 2, "no scrinalia schema")


def test_a_port_in_use_is_one_line_and_exit_2(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    port = w.url.rstrip("/").rsplit(":", 1)[1]
    taken = cli("web", "--bind", f"127.0.0.1:{port}", dsn=login_dsn(db_dsn, role_logins["reader"]))
    assert_one_line_error(taken, 2, "cannot listen")


def test_a_lost_database_is_a_page_that_says_so(ledger, db_dsn, role_logins, start_web, admin):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    admin.execute("ALTER ROLE sw_login_reader NOLOGIN")
    try:
        a = request(w.url)
    finally:
        admin.execute("ALTER ROLE sw_login_reader LOGIN")
    assert a.status == 503 and "Database unavailable" in a.body
    assert w.proc.poll() is None and w.get("/").status == 200


def _idle_client(url: str) -> socket.socket:
    """A client that connects and never finishes its request."""
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(b"GET / HTTP/1.0\r\n")
    return s


def test_a_client_that_never_finishes_is_cut_off_at_the_request_timeout(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]), "--request-timeout", "1")
    with _idle_client(w.url) as idle:
        assert idle.recv(1024) == b""  # closed by the server (the client's own timeout is 20 s)
    assert w.get("/").status == 200


def test_requests_beyond_the_bound_get_503_at_once(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]), "--request-timeout", "60")
    idle = [_idle_client(w.url) for _ in range(8)]  # each holds one of the 8 slots (accepted in order)
    try:
        a = w.get("/")
        assert a.status == 503 and a.headers["Retry-After"] == "1"
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: w.get("/").status == 200, timeout=20, what="a slot free again")


def test_too_many_fields_is_a_refusal_not_a_traceback(ledger, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    assert w.get("/?" + "&".join(f"f{i}=1" for i in range(20))).status == 400
    assert "Traceback" not in w.log()
