"""The scheduler's statements are all sent, and its start-up check requires only the
functions they call: a statement or a required function nobody uses is dead weight a
login would be refused for."""

from __future__ import annotations

import re
from pathlib import Path

from scrinalia_workers.gateway.statements import scheduler as sql

SHIM = Path(sql.__file__).resolve().parents[2]


def _statements() -> dict[str, str]:
    return {k: v for k, v in vars(sql).items() if k.isupper() and isinstance(v, str)}


def test_every_statement_is_sent_somewhere():
    sources = "\n".join(p.read_text() for p in SHIM.rglob("*.py") if p.resolve() != Path(sql.__file__).resolve())
    unused = [k for k in _statements() if not re.search(rf"\bsql\.{k}\b|\b{k}\b", sources)]
    assert unused == []


def test_every_required_function_is_called_by_a_statement():
    text = "\n".join(_statements().values())
    uncalled = [f for f in sql.REQUIRED_FUNCTIONS if f"scrinalia.{f.split('(')[0]}(" not in text]
    assert uncalled == []
