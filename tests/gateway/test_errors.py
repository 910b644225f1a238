"""The SQLSTATEs the shim acts on are the ones the SQL raises, and the cron module's
errors carry the SQLSTATE of their SQL twins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import raises_sqlstate
from scrinalia_workers import cron, errors

SQL = Path(__file__).resolve().parents[2] / "sql"


def _raised_in_sql() -> set[str]:
    found: set[str] = set()
    for f in SQL.glob("*.sql"):
        code = "\n".join(line.split("--", 1)[0] for line in f.read_text().splitlines())
        found |= set(re.findall(r"'(SW\d{3})'", code))
    return found


def test_every_sqlstate_the_shim_compares_is_one_the_sql_raises():
    raised = _raised_in_sql()
    assert raised, "no SW SQLSTATE found in sql/: the pattern is wrong"
    named = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str) and re.fullmatch(r"SW\d{3}", v)}
    assert named and named <= raised
    assert {errors.InvalidCron.sqlstate, errors.InvalidTimezone.sqlstate} <= raised


def test_the_cron_modules_errors_carry_their_sql_twins_sqlstates(db):
    with pytest.raises(errors.InvalidCron) as bad_cron:
        cron.validate("61 * * * *")
    assert bad_cron.value.field == 1 and bad_cron.value.field_name == "minute"
    with raises_sqlstate(bad_cron.value.sqlstate, "field 1 (minute)"):
        db.execute("SELECT scrinalia.validate_cron('61 * * * *')")
    with pytest.raises(errors.InvalidTimezone) as bad_zone:
        cron.validate_timezone("Mars/Olympus")
    with raises_sqlstate(bad_zone.value.sqlstate):
        db.execute("SELECT scrinalia.validate_timezone('Mars/Olympus')")
