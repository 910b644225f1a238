"""How the CLI prints: instants, durations, tables, fields and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scrinalia_workers.text import for_json


def utc(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def in_zone(ts: datetime | None, tz: str | None) -> str | None:
    if ts is None or not tz:
        return None
    try:
        local = ts.astimezone(ZoneInfo(tz))
    except (ZoneInfoNotFoundError, ValueError):  # PostgreSQL knows a zone Python's tzdata lacks
        return f"({tz} unknown to this host's tzdata)"
    return local.strftime("%Y-%m-%d %H:%M ") + (local.tzname() or tz)


def duration(d: timedelta | None) -> str | None:
    if d is None:
        return None
    s = d.total_seconds()
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.astimezone(UTC).isoformat()
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, timedelta):
        return v.total_seconds()
    if isinstance(v, Decimal):
        return float(v)
    return str(v)


def print_json(data: Any) -> None:
    print(for_json(json.dumps(data, default=_jsonable, indent=2, ensure_ascii=False)))


def cell(v: Any) -> str:
    """A value as one cell or field: its own newlines and tabs shown, not obeyed."""
    return "-" if v is None else str(v).replace("\n", "\\n").replace("\t", "\\t")


def brief(v: Any, width: int | None = None) -> str | None:
    """A text read from the database as part of one line: escaped as a cell, cut to
    `width` with an ellipsis when given. None stays None."""
    if v is None:
        return None
    s = cell(v)
    return s if width is None or len(s) <= width else s[: max(width - 1, 0)] + "…"


def print_line(text: str) -> None:
    """A line built around text read from the database: whatever newline or tab that
    text holds shows as an escape, never starts a line of its own."""
    print(cell(text))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    cells = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if title:
        print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if not cells:
        print("(none)")


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for k, v in pairs:
        print(f"{k.ljust(width)}  {cell(v)}")
