"""A backlog of quick runs with a few slow ones among them, drained by three runner
processes at their defaults: the runs claimed behind a slow handler are run, not
handed back to the queue (a hand-back costs a claim and a release for nothing), and
every run is reported exactly once.

The mix is the soak's, scaled down: one handler in 25 sleeps, 0.5 to 2 s."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from helpers import make_workers
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow  # real runner processes, handlers that sleep

RUNS = 375
RUNNERS = 3
HANDLERS = """
import time

def handle(run):
    if run["run_id"] % 25 == 0:  # one in 25: slow
        time.sleep(0.5 + (run["run_id"] // 25 % 7) * 0.25)

HANDLERS = {"*": handle}
"""


def _events(path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_a_mix_of_quick_and_slow_handlers_hands_back_under_five_percent(tmp_path, db, db_dsn, procs):
    (tmp_path / "mix_handlers.py").write_text(HANDLERS)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    workers = make_workers(db, RUNS)
    logs = [tmp_path / f"runner-{i}.log" for i in range(RUNNERS)]
    runners = [
        procs.runner(db_dsn, "mix_handlers", "--runner-id", f"mix-{i}", log=log, env=env) for i, log in enumerate(logs)
    ]
    wait_for(
        lambda: (
            db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'scrinalia-runner mix-%'"
                " AND query LIKE '%next_claimable_at%'"
            ).fetchone()[0]
            == RUNNERS
        ),
        30,
        what="the runners connected and idle",
        watch=runners,
    )
    with db.transaction():  # the backlog appears at once, as a scheduler pass makes it
        db.execute("SELECT count(scrinalia.enqueue(w)) FROM unnest(%s::text[]) w", (workers,))
    wait_for(
        lambda: (
            db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'SUCCEEDED'").fetchone()[0]
            == RUNS
        ),
        90,
        what="every run finished",
        watch=runners,
    )
    assert procs.stop_all() == [0] * RUNNERS
    events = [e for log in logs for e in _events(log)]
    claimed = sum(1 for e in events if e.get("event") == "claimed")
    released = sum(len(str(e["runs"]).split(",")) for e in events if e.get("event") == "released" and e["runs"])
    finished = Counter(e["run_id"] for e in events if e.get("event") == "finished")
    assert sorted(finished) == sorted(r[0] for r in db.execute("SELECT run_id FROM scrinalia.archive_worker_runs"))
    assert set(finished.values()) == {1}  # each run reported exactly once
    assert claimed == RUNS + released  # a released run is claimed again, once more
    assert released < 0.05 * claimed, f"{released} of {claimed} claimed runs handed back"
