"""What the benchmarks' smoke tests share: fresh databases made from the migrated
template, as bench/run.py gives each benchmark its own."""

from __future__ import annotations

import os

import psycopg
import pytest


@pytest.fixture
def fresh_dbs(admin, admin_dsn, template_db):
    made: list[str] = []

    def dsn_for(name: str) -> str:
        db = f"{name}_{os.getpid()}"
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{db}" TEMPLATE "{template_db}"')
        made.append(db)
        return psycopg.conninfo.make_conninfo(admin_dsn, dbname=db)

    yield dsn_for
    for db in made:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
