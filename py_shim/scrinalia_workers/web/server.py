"""The web view's HTTP server: the standard library's threaded http.server, bounded.

Bounds: at most `max_concurrent` requests at once (more get 503 at once, never a
queue of threads), a socket timeout per request, a statement timeout per page, a body
limit per POST, `page_size` rows per panel (the rest behind an "older" link), one
connection per request, closed after it (nothing is shared between requests but the
action token). Every response carries the headers that keep a browser from running or
framing anything of the page's (SECURITY_HEADERS).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg

from scrinalia_workers.errors import ScrinaliaError
from scrinalia_workers.gateway.connection import connect
from scrinalia_workers.gateway.statements import web as sql
from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.web.access import who_is
from scrinalia_workers.web.actions import Actions, Refused
from scrinalia_workers.web.bind import host_allowed
from scrinalia_workers.web.history import runs_page, worker_page
from scrinalia_workers.web.layout import STYLE, message_page, page
from scrinalia_workers.web.markup import Html
from scrinalia_workers.web.overview import overview
from scrinalia_workers.web.panels import View

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MAX_BODY = 4096  # an action's form: a token, an action, a name or id


@dataclass(frozen=True)
class Settings:
    dsn: str
    allowed_hosts: frozenset[str]
    actions: Actions | None  # None: no --allow-actions
    page_size: int = 50
    request_timeout: float = 15.0
    max_concurrent: int = 8


class WebServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 16

    def __init__(self, address: tuple[str, int], settings: Settings, log: EventLog):
        self.settings = settings
        self.log = log
        self.slots = threading.BoundedSemaphore(settings.max_concurrent)
        # the socket timeout of each request: StreamRequestHandler reads it from the class
        super().__init__(address, type("BoundedHandler", (Handler,), {"timeout": settings.request_timeout}))

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Handler(BaseHTTPRequestHandler):
    server: WebServer
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive holds a slot
    server_version = "scrinalia-workers"
    sys_version = ""

    def end_headers(self) -> None:
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        self.server.log("web_request", level="debug", client=self.client_address[0], line=format % args)

    def _send(self, status: int, body: str, kind: str = "text/html; charset=utf-8") -> None:
        data = body.encode("utf-8", "backslashreplace")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _host_ok(self) -> bool:
        if host_allowed(self.headers.get("Host"), self.server.settings.allowed_hosts):
            return True
        self._send(421, message_page("Refused", "this server does not answer to that Host name (see --allow-host)"))
        return False

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        query = _fields(url.query)
        if query is None:
            self._send(400, message_page("Refused", "too many query fields"))
            return
        if url.path == "/style.css":
            self._send(200, STYLE, "text/css; charset=utf-8")
        elif url.path in ("/", "/runs", "/worker"):
            if url.path == "/worker" and not query.get("name"):
                self._send(404, message_page("Not found", "which worker? /worker?name=NAME"))
                return
            self._page(url.path, query)
        else:
            self._send(404, message_page("Not found", "no such page"))

    def _connect(self) -> psycopg.Connection[Any] | None:
        try:
            conn = connect(self.server.settings.dsn, application_name="scrinalia-workers web", connect_timeout=5)
            ms = str(int(self.server.settings.request_timeout * 1000))
            conn.execute(sql.STATEMENT_TIMEOUT, {"ms": ms})
            return conn
        except (ScrinaliaError, psycopg.Error) as e:
            self.server.log("web_database_unavailable", level="warning", error=one_line(e))
            self._send(503, message_page("Database unavailable", f"{one_line(e)} (reload to try again)"))
            return None

    def _page(self, path: str, query: dict[str, str]) -> None:
        conn = self._connect()
        if conn is None:
            return
        try:
            with conn:
                status, text = self._render(conn, path, query)
            self._send(status, text)
        except Exception as e:  # noqa: BLE001 - a bug of ours: logged, one page lost, the server goes on
            self.server.log("web_page_failed", level="error", path=path, error=f"{type(e).__name__}: {one_line(e)}")
            self._send(500, message_page("Error", f"this page could not be shown ({type(e).__name__}); the log has it"))

    def _render(self, conn: psycopg.Connection[Any], path: str, query: dict[str, str]) -> tuple[int, Html]:
        s = self.server.settings
        login = who_is(conn)
        actions = None
        if s.actions is not None and login.can_operate:
            actions = dataclasses.replace(s.actions, rerun=login.can_rerun)
        view = View(conn, login, self.server.log, actions, s.page_size)
        now = _scalar(conn, sql.NOW)
        most = _scalar(conn, sql.MAX_ATTEMPTS)
        if path == "/":
            status, title, body = 200, "Overview", overview(view, now, query.get("after", ""), most)
        elif path == "/runs":
            status, title, body = 200, "Runs", runs_page(view, query.get("before"))
        else:
            name = query["name"]
            status, body = worker_page(view, name, query.get("before"), most)
            title = f"Worker {name}"
        return status, page(view, title, now, body)

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        actions = self.server.settings.actions
        if urlsplit(self.path).path != "/action" or actions is None:
            self._send(404 if actions is not None else 403, message_page("Refused", "this server takes no actions"))
            return
        try:
            length = int(self.headers.get("Content-Length") or "-1")
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._send(413, message_page("Refused", "a form of this server is small and says its length"))
            return
        raw = self.rfile.read(length).decode("utf-8", "replace")
        fields = _fields(raw)
        if fields is None:
            self._send(400, message_page("Refused", "too many form fields"))
            return
        try:
            action, value = actions.check(fields, self.headers.get("Origin"), self.headers.get("Host"))
            conn = self._connect()
            if conn is None:
                return
            with conn:
                login = who_is(conn)
                if not login.can_operate:
                    raise Refused(403, f"this login ({login.kind}) may not act: it needs scrinalia_operator")
                if action == "rerun" and not login.can_rerun:
                    raise Refused(400, "refused: re-run is not offered by this database")
                done = actions.run(conn, action, value, self.client_address[0])
        except Refused as e:
            self.server.log("web_action_refused", level="warning", reason=str(e))
            self._send(e.status, message_page("Refused", str(e)))
            return
        self.server.log("web_action", action=action, value=value, client=self.client_address[0])
        self._send(200, message_page("Done", done))


def _fields(text: str) -> dict[str, str] | None:
    """A query or form's fields, the first value of each; None for more than a page takes."""
    try:
        return {k: v[0] for k, v in parse_qs(text, max_num_fields=8).items()}
    except ValueError:
        return None


def _scalar(conn: psycopg.Connection[Any], statement: str) -> Any:
    """The one value of `statement`, or None when this login may not read it."""
    try:
        row = conn.execute(statement).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else row[0]
