"""Known-bad variants, planted to prove that the explorer finds what it looks for.
Nothing here changes the real SQL: the bug is in a test-only actor.

`unchecked-tick`: a scheduler whose tick skips the lock check (check_scheduler_lock),
logged in as the schema's owner, and whose work session does not name itself the
scheduler's, so that the caller guard (check_scheduler_caller) trusts it as the owner
by hand. Once its lock session is gone (a crash at some step), it ticks all the same:
a session that does not hold the lock decides. The same scenario with the real
scheduler on its group's login (`unchecked-tick-control`) holds in every
interleaving, and so does the real scheduler on the owner's login
(explore_scenarios.OWNER_SCHEDULER)."""

from __future__ import annotations

import psycopg
from explore_actors import Plan, Scheduler
from explore_scenarios import HOLDS, TICK
from explore_world import Scenario


class UncheckedScheduler(Scheduler):
    """The planted bug: the tick's transaction opened without the lock check, on a work
    session named as a person's would be."""

    def __init__(self, name: str, dsn: str):
        super().__init__(name, dsn)
        self.work.application_name = "psql"

    def step_tick_check(self) -> Plan:
        self._sessions_up()

        def run(c: psycopg.Connection) -> None:
            c.execute("BEGIN")

        return self.work, run


def _unchecked(name: str, kind: str) -> Scenario:
    return Scenario(
        name,
        {
            "a": (kind, [*TICK]),
            "b": ("scheduler", ["take_lock", "heartbeat", *TICK]),
            "fault": ("fault", ["crash.a.lock"]),
        },
        setup=HOLDS,
        kinds={"unchecked": UncheckedScheduler},
    )


PLANTED = _unchecked("unchecked-tick", "unchecked")
PLANTED_CONTROL = _unchecked("unchecked-tick-control", "scheduler")
