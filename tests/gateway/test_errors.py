"""One errors module: every SQLSTATE the SQL raises has its class, and a refusal from the
database arrives as that class."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from scrinalia_workers import errors

SQL = Path(__file__).resolve().parents[2] / "sql"


def _raised_in_sql() -> set[str]:
    found: set[str] = set()
    for f in SQL.glob("*.sql"):
        code = "\n".join(line.split("--", 1)[0] for line in f.read_text().splitlines())
        found |= set(re.findall(r"'(SW\d{3})'", code))
    return found


def test_every_sqlstate_the_sql_raises_has_its_class_and_no_class_is_left_over():
    raised = _raised_in_sql()
    assert raised, "no SW SQLSTATE found in sql/: the pattern is wrong"
    assert raised == set(errors.REFUSALS)


def test_each_refusal_class_is_named_once_and_is_a_scrinalia_error():
    assert len({cls.__name__ for cls in errors.REFUSALS.values()}) == len(errors.REFUSALS)
    for state, cls in errors.REFUSALS.items():
        assert cls.sqlstate == state and issubclass(cls, errors.ScrinaliaError)


def test_a_refusal_from_the_database_arrives_as_its_class_with_its_hint(db):
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT scrinalia.enqueue('no-such-worker')")
    found = errors.refusal(caught.value)
    assert isinstance(found, errors.UnknownWorker)
    assert "no-such-worker" in str(found) and found.__cause__ is caught.value


def test_an_error_that_is_no_refusal_is_not_turned_into_one(db):
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT 1/0")
    assert errors.refusal(caught.value) is None
