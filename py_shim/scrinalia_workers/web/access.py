"""Who the web view logs in as, what that login may read and do, and the words for
what it cannot read (a panel says so instead of failing the page)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.gateway.checks import GROUPS
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import web as sql

# the groups, most able first: a login is described by the first it is in
_RANK = ("scrinalia_operator", "scrinalia_reader", "scrinalia_monitor", "scrinalia_runner", "scrinalia_scheduler")


@dataclass(frozen=True)
class Login:
    name: str
    groups: tuple[str, ...]
    superuser: bool
    can_operate: bool  # may call the operator's writes
    can_rerun: bool  # scrinalia.rerun exists on this database and may be called

    @property
    def kind(self) -> str:
        """'a reader', 'a monitor', ... or 'in no scrinalia group'."""
        if self.superuser:
            return "a superuser"
        for g in _RANK:
            if g in self.groups:
                return "an operator" if g == "scrinalia_operator" else f"a {g.removeprefix('scrinalia_')}"
        return "in no scrinalia group"

    def cannot_read(self, what: str) -> str:
        return f"this login ({self.kind}) cannot read {what}: grant scrinalia_reader"


def who_is(conn: psycopg.Connection[Any]) -> Login:
    cur = conn.cursor(row_factory=dict_row)
    row = one(cur.execute(sql.LOGIN_GROUPS, {"groups": list(GROUPS)}))
    try:
        act = one(cur.execute(sql.CAN_ACT))
    except psycopg.Error:  # no usage of the schema, or no operator's functions on this database
        act = {"operate": False, "rerun": False}
    return Login(row["login"], tuple(row["groups"]), bool(row["superuser"]), bool(act["operate"]), bool(act["rerun"]))
