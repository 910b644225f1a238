"""A runner of this release left running while its database is rolled back to an earlier
head exits 2 with the advice, instead of looping on a missing function or column."""

from __future__ import annotations

import pytest

from scrinalia_workers.admin import migrate as m

pytestmark = pytest.mark.slow  # the real runner process


def test_a_runner_left_running_after_a_rollback_exits_2_saying_why(db_dsn, procs):
    runner = procs.runner(db_dsn, "demo_handlers", "--runner-id", "left-behind")
    runner.wait_event("runner started", timeout=30)
    assert m.rollback(db_dsn, 6) == [
        "0010_rerun",
        "0009_metrics_tallies",
        "0008_metrics_indexes",
        "0007_cron_masks",
        "0006_ledger_indexes",
        "0005_health",
    ]
    runner.popen.wait(60)  # its next claim (or its idle wake-up) meets the rolled-back code
    assert runner.popen.returncode == 2, runner.raw
    text = "".join(runner.raw)
    assert "Traceback" not in text and "database error" not in text, text  # no loop on the missing code
    (error,) = [e for e in runner.events if e["event"] == "config error"]
    assert "rolled back" in error["reason"] and m.head_ids()[-1] in error["reason"], error
