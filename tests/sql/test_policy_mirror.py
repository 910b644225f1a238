"""The shim's policy numbers (scrinalia_workers.policy) equal their one home, the
functions of sql/05_policy.sql: a change on one side alone fails here."""

from __future__ import annotations

import pytest

from scrinalia_workers import policy


@pytest.mark.parametrize("name", sorted(policy.MIRRORS))
def test_each_mirror_equals_its_policy_function(db, name):
    (in_sql,) = db.execute(f"SELECT {policy.MIRRORS[name]}").fetchone()
    assert getattr(policy, name) == in_sql


def test_every_mirror_is_checked():
    numbers = {n for n, v in vars(policy).items() if n.isupper() and isinstance(v, (int, float))}
    assert numbers == set(policy.MIRRORS)
