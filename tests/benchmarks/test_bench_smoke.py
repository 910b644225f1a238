"""The benchmarks' quick mode still runs and its own correctness checks still pass.

CI does not run the benchmarks (python -m bench); this keeps their code from
rotting: the tick and claim benchmarks at smoke sizes on the test database.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import claim_bench, tick_bench  # noqa: E402
from bench.common import InvariantError  # noqa: E402


def test_quick_tick_decides_every_schedule_once(db_dsn):
    r = tick_bench.run(db_dsn, quick=True)
    for f in r.data["figures"]:
        assert f["reps"] >= 1
        for t in f["all"]:
            assert t["due"] == f["n"]
            assert t["decisions"] == {"ENQUEUED": f["n"] - f["active"], "SKIPPED": f["active"]}
            assert t["python"] > 0 and t["sql_tick"] > 0
        # the scheduler's own pass ran in every round (and wrote the tick's rows: run() checks)
        assert len(f["passes"]) == f["reps"] and min(f["passes"]) > 0
    assert len(r.rows) == len(r.data["figures"])


def test_the_floor_pays_its_cron_computation_in_its_timed_transaction(db_dsn, monkeypatch):
    """The floor the scheduler's pass is held to includes the cron computation: once,
    after its own transaction's now() (so no occurrence can pass in between), timed."""
    active = tick_bench.prepare(db_dsn, 50)
    real = tick_bench.cron.next_occurrences
    calls = []

    def recorded(pairs, after):
        calls.append(after)
        return real(pairs, after)

    monkeypatch.setattr(tick_bench.cron, "next_occurrences", recorded)
    with claim_bench.conn(db_dsn, autocommit=True) as c:
        f = tick_bench.floor_once(c)
    tick_bench.verify_floor(db_dsn, 50, active, f)
    assert calls == [f["db_now"]]
    assert f["python"] > 0 and abs(f["total"] - f["sql"] - f["python"]) < 1e-6


def test_quick_claim_has_no_double_claim_and_loses_nothing(db_dsn):
    r = claim_bench.run(db_dsn, quick=True)
    modes = {f["mode"] for f in r.data["figures"]}
    assert modes == {"processes", "threads"}
    for f in r.data["figures"]:
        assert f["twice"] == 0 and f["lost"] == 0
        assert sum(f["per_runner"]) == f["n"]
        assert f["rate"] > 0


def test_tick_check_catches_a_wrong_count(db_dsn):
    """The checks the benchmarks rely on do fail: a tick claimed to skip one more than it did."""
    active = tick_bench.prepare(db_dsn, 200)
    with claim_bench.conn(db_dsn) as c:
        t = tick_bench.tick_once(c)
    tick_bench.verify(db_dsn, 200, active, t)
    with pytest.raises(InvariantError, match="SKIPPED"):
        tick_bench.verify(db_dsn, 200, active + 1, t)


@pytest.mark.slow
def test_quick_drain_with_the_real_runner_and_the_bare_statements(db_dsn, tmp_path):
    from bench import drain_bench

    ours = drain_bench.runner_drain(db_dsn, 300, None, tmp_path)
    bare = drain_bench.bare_drain(db_dsn, 300)
    assert drain_bench.bare_drain(db_dsn, 300, batch=32)["rate"] > 0
    assert ours["rate"] > 0 and bare["rate"] > 0
    assert ours["owners"] >= 1 and bare["owners"] >= 1
    # the runners really ran: their JSON log lines name every run once
    import json

    finished = [
        json.loads(line)["run_id"]
        for log in tmp_path.glob("runner-*.log")
        for line in log.read_text().splitlines()
        if '"finished"' in line
    ]
    assert len(finished) == len(set(finished)) == 300


@pytest.mark.slow
def test_quick_drain_on_a_ledger_with_history(db_dsn, tmp_path):
    """The history drain keeps the finished runs and counts only the ones it added;
    its poll stops only when every added run is SUCCEEDED."""
    from bench import drain_bench

    upto = drain_bench.history_prepare(db_dsn, 200, 1000)
    for _ in range(2):  # the second round deletes the first round's runs, not the history
        r = drain_bench.runner_drain(db_dsn, 200, None, tmp_path, history_upto=upto)
        assert r["rate"] > 0
    with claim_bench.conn(db_dsn) as c:
        kept, added = c.execute(
            "SELECT count(*) FILTER (WHERE run_id <= %(u)s), count(*) FILTER (WHERE run_id > %(u)s "
            "AND status = 'SUCCEEDED') FROM scrinalia.archive_worker_runs",
            {"u": upto},
        ).fetchone()
    assert (kept, added) == (1000, 200)


def test_history_layouts_leave_the_drained_runs_together_or_scattered(db_dsn):
    """What BENCHMARKS.md says of the two history layouts: on a packed history the
    free-space map hands out each page's last few hundred bytes, one new row a page;
    on the history as use leaves it, the new runs fill the space of dead versions."""
    from bench import drain_bench, seed

    pages = {}
    for layout in ("dense", "use"):
        upto = drain_bench.history_prepare(db_dsn, 200, 20_000, layout)
        drain_bench._ours_prepare(db_dsn, 200, upto)
        with claim_bench.conn(db_dsn) as c:
            assert c.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 20_000
            seed.queued_runs(c, 200)
            rows = c.execute(
                "SELECT run_id, lease_token FROM scrinalia.claim_runs('t', '5 minutes', NULL, 500)"
            ).fetchall()
            assert len(rows) == 200
            c.execute(
                "SELECT * FROM scrinalia.finish_runs(%s, %s, %s::scrinalia.run_status[], %s, %s)",
                ([r[0] for r in rows], [r[1] for r in rows], ["SUCCEEDED"] * 200, [None] * 200, [None] * 200),
            )
        # the bench's own count (and its check that all 200 are SUCCEEDED)
        pages[layout] = drain_bench._ours_check(db_dsn, 200, upto)["pages"]
    assert pages["dense"] >= 150, pages
    assert pages["use"] <= 20, pages
