"""The web view: `scrinalia-workers web --dsn DSN [--bind 127.0.0.1:8080]`.

What `status`, `runs`, `runs WORKER --timeline` and `schedule get` show, as pages (the
same views and functions: gateway/statements/web.py), for a reader (or a monitor, told
what it cannot see) login; read-only unless --allow-actions and an operator login.
The standard library's threaded http.server with a template helper that escapes every
value (markup.py): no dependency beyond the base install's.

  bind.py      where it listens and which Host names it answers
  server.py    the HTTP server, its bounds and headers, the routes
  access.py    who the login is and what it may read or do
  panels.py    a page's panels: each read and each row on its own
  overview.py  health, alerts with what to do, agenda, active runs
  history.py   runs, and a worker's schedule, periods and runs
  actions.py   the operator's forms, their token and Origin check
  layout.py    the frame and the style sheet
  markup.py    the template helper
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, TextIO

from scrinalia_workers.errors import UsageError
from scrinalia_workers.logs import EventLog
from scrinalia_workers.web.bind import Bind
from scrinalia_workers.web.server import Settings, WebServer

__all__ = ["serve"]


def serve(bind: Bind, settings: Settings, log: EventLog, notes: list[str], out: TextIO = sys.stderr) -> int:
    """Serves until SIGTERM or Ctrl-C; the first line says where (the port, when 0 was
    asked), then the start-up's notes (what the login may not do, an exposed address)."""
    try:
        server = WebServer((bind.host, bind.port), settings, log)
    except OSError as e:
        raise UsageError(f"cannot listen on {bind.host}:{bind.port}: {e.strerror or e}") from None
    port = server.server_address[1]
    for line in [f"serving {bind.url(port)}", *notes]:
        print(f"scrinalia-workers web: {line}", file=out, flush=True)

    def stop(*_: Any) -> None:  # shutdown() waits for serve_forever: from another thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0
