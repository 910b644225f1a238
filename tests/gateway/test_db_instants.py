"""Every connection of ours reads any timestamptz the server holds: the ones Python's
datetime cannot (+-infinity, 4713 BC, year 20000: only a hand write puts them in a row)
come back as the earliest or the latest datetime, in text and in binary."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scrinalia_workers.gateway import connection as dbmod

CASES = [
    ("-infinity", dbmod.EARLIEST),
    ("4713-01-01 00:00+00 BC", dbmod.EARLIEST),
    ("infinity", dbmod.LATEST),
    ("20000-01-01 00:00+00", dbmod.LATEST),
    ("2026-12-03 10:00+00", datetime(2026, 12, 3, 10, 0, tzinfo=UTC)),
    ("0001-01-01 00:00+00", datetime(1, 1, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize("binary", [False, True])
def test_any_instant_reads_and_keeps_its_order(db_dsn, binary):
    with dbmod.connect(db_dsn) as conn:
        row = (
            conn.cursor(binary=binary)
            .execute(
                "SELECT " + ", ".join("%s::timestamptz" for _ in CASES) + ", NULL::timestamptz",
                [text for text, _ in CASES],
            )
            .fetchone()
        )
    assert list(row[:-1]) == [want for _, want in CASES] and row[-1] is None
    assert sorted(row[:-1]) == [row[0], row[1], row[5], row[4], row[2], row[3]]
