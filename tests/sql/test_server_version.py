"""The suite runs on the PostgreSQL it was asked for (make test-pg-all: SCRINALIA_PG=N),
and on no major older than the oldest supported."""

from __future__ import annotations

import os

from scrinalia_workers.testkit.servers import NEWEST, OLDEST


def test_the_server_is_the_major_asked_for_and_a_supported_one(db):
    major = db.execute("SELECT current_setting('server_version_num')::int / 10000").fetchone()[0]
    assert OLDEST <= major
    # (an existing server, SCRINALIA_TEST_DSN, is of the operator's choosing)
    asked = "" if os.environ.get("SCRINALIA_TEST_DSN") else os.environ.get("SCRINALIA_PG", "")
    if asked.isdigit():
        assert major == int(asked)
    elif asked == "embedded":
        assert major == NEWEST
