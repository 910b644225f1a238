"""Python's validate() and SQL's scrinalia.validate_cron agree on every expression.

Same accept/reject, same field blamed, same message; all SQL checks in one call of
a temporary function that catches each expression's error.
"""

from __future__ import annotations

import re

import pytest

from cron_corpus import generated, hand_written
from scrinalia_workers.cron import CronError, validate

CHECK_FN = """
CREATE FUNCTION pg_temp.cron_check(exprs text[])
RETURNS TABLE (i int, state text, errmsg text, normalised text)
LANGUAGE plpgsql AS $$
BEGIN
    FOR k IN 1..coalesce(cardinality(exprs), 0) LOOP
        i := k;
        BEGIN
            PERFORM scrinalia.validate_cron(exprs[k]);
            state := NULL;
            errmsg := NULL;
            -- the normalisation scrinalia.put_schedule stores
            normalised := regexp_replace(btrim(exprs[k], E' \\t'), E'[ \\t]+', ' ', 'g');
        EXCEPTION WHEN OTHERS THEN
            state := SQLSTATE;
            errmsg := SQLERRM;
            normalised := NULL;
        END;
        RETURN NEXT;
    END LOOP;
END $$
"""


# Field texts, valid and not, each tried in every one of the five positions.
def python_verdict(expr: str | None) -> tuple[str | None, int | None, str | None]:
    try:
        return None, None, validate(expr)
    except CronError as e:
        return str(e), e.field, None


def sql_field(message: str) -> int | None:
    # the field clause follows the quoted expression; find the last one so that
    # an expression containing the words itself cannot fool us
    found = re.findall(r'": field ([1-5]) \((?:minute|hour|day-of-month|month|day-of-week)\): ', message)
    return int(found[-1]) if found else None


@pytest.fixture
def cron_check(db):
    db.execute(CHECK_FN)

    def check(exprs: list[str | None]) -> list[tuple[str | None, str | None, str | None]]:
        rows = db.execute(
            "SELECT i, state, errmsg, normalised FROM pg_temp.cron_check(%s) ORDER BY i", (exprs,)
        ).fetchall()
        assert [r[0] for r in rows] == list(range(1, len(exprs) + 1))
        return [(r[1], r[2], r[3]) for r in rows]

    return check


def assert_agree(exprs, results):
    disagreements = []
    accepted = rejected = 0
    for expr, (state, sql_msg, sql_norm) in zip(exprs, results):
        py_msg, py_field, py_norm = python_verdict(expr)
        if py_msg is None:
            accepted += 1
            ok = state is None and sql_norm == py_norm
        else:
            rejected += 1
            ok = state == "SW003" and sql_msg == py_msg and sql_field(sql_msg) == py_field
        if not ok:
            disagreements.append((expr, py_msg, py_norm, state, sql_msg, sql_norm))
    assert not disagreements, "\n".join(map(repr, disagreements[:20]))
    return accepted, rejected


def test_hand_written_agree(cron_check):
    exprs = hand_written()
    assert len(exprs) > 500
    accepted, rejected = assert_agree(exprs, cron_check(exprs))
    assert accepted > 100 and rejected > 300


def test_generated_agree(cron_check):
    exprs = generated()
    assert len(exprs) == 4000
    accepted, rejected = assert_agree(exprs, cron_check(exprs))
    assert accepted > 1500 and rejected > 1000


def test_validate_cron_is_strict_plpgsql(db):
    row = db.execute("""
        SELECT l.lanname, p.provolatile, p.proconfig
          FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.oid = 'scrinalia.validate_cron(text)'::regprocedure""").fetchone()
    assert row[0] == "plpgsql"
    assert row[1] == "i"
    assert row[2] == ["search_path=pg_catalog, pg_temp"]
    src = db.execute("SELECT prosrc FROM pg_proc WHERE oid = 'scrinalia.validate_cron(text)'::regprocedure").fetchone()[
        0
    ]
    assert not re.search(r"\bEXECUTE\b", src, re.IGNORECASE)
