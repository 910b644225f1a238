"""Fixtures of the reliability suite; every test here is marked `reliability`."""

from __future__ import annotations

import pathlib

import psycopg
import pytest

_HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


def table_fingerprints(conn: psycopg.Connection) -> dict[str, tuple[int, str]]:
    """(row count, md5 of all rows) of every table in the scrinalia schema."""
    tables = [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'scrinalia' ORDER BY 1").fetchall()]
    out = {}
    for t in tables:
        out[t] = conn.execute(
            f'SELECT count(*), coalesce(md5(string_agg(x::text, E\'\\n\' ORDER BY x::text)), \'\') '
            f'FROM scrinalia."{t}" x').fetchone()
    return out


@pytest.fixture
def fingerprint():
    return table_fingerprints
