"""One line per decision, as text or as JSON objects (--json)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any, TextIO


def _text(v: Any) -> str:
    if isinstance(v, datetime):
        return v.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    s = str(v)
    return json.dumps(s) if (" " in s or not s) else s


class EventLog:
    def __init__(self, component: str, as_json: bool = False, out: TextIO | None = None):
        self.component = component
        self.as_json = as_json
        self.out = out or sys.stderr

    def __call__(self, event: str, **fields: Any) -> None:
        ts = datetime.now(timezone.utc)
        if self.as_json:
            record = {"ts": _text(ts), "component": self.component, "event": event}
            record.update({k: (_text(v) if isinstance(v, datetime) else v) for k, v in fields.items()})
            line = json.dumps(record, default=str)
        else:
            parts = [_text(ts), self.component, event]
            parts += [f"{k}={_text(v)}" for k, v in fields.items() if v is not None]
            line = " ".join(parts)
        print(line, file=self.out, flush=True)
