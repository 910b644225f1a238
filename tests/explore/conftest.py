"""The explorer's world: one migrated database per scenario, its actors logged in as
their groups' logins (tests/conftest.py's role_logins), the worker registered."""

from __future__ import annotations

import psycopg
import pytest
from explore_world import WORKER, Scenario, World

from helpers import make_worker


@pytest.fixture
def make_world(db, db_dsn, role_logins):
    make_worker(db, WORKER)
    dsn_as = {g: psycopg.conninfo.make_conninfo(db_dsn, user=login) for g, login in role_logins.items()}
    worlds: list[World] = []

    def _make(scenario: Scenario) -> World:
        w = World(db_dsn, dsn_as, scenario)
        worlds.append(w)
        return w

    yield _make
    for w in worlds:
        try:
            w.close()
        except psycopg.Error:
            pass
