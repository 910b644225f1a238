"""Issue 13: a migrate while clients run gives them no error (rolling deploy).

Threads logged in as the group logins loop enqueue -> claim_next -> finish (and a
reader reads the views) while the code is installed 40 times, alternately this
release's and a variant whose every ledger function has another body (as a release
that changes them), so each migrate really replaces the code the clients call; every
call overlapping a migrate must succeed. The latencies of those calls are what
clients wait for. (The previous release's daemons through this release's migrate:
tests/reliability/test_rolling_upgrade.py.)"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from helpers import code_digest, make_worker, sql_variant
from scrinalia_workers import sqlfiles
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

CLIENTS = 4
# The old drop-and-recreate failed a client in 2 runs of 3 at 30 migrates: 40 it is.
MIGRATES = 40


class Calls:
    def __init__(self):
        self.lock = threading.Lock()
        self.done: list[tuple[float, float, str]] = []  # start, end, what
        self.errors: list[str] = []

    def timed(self, what, fn):
        t0 = time.monotonic()
        try:
            return fn()
        except psycopg.Error as e:
            with self.lock:
                self.errors.append(f"{what}: [{e.sqlstate}] {e}")
            return None
        finally:
            with self.lock:
                self.done.append((t0, time.monotonic(), what))

    def count(self) -> int:
        with self.lock:
            return len(self.done)


def _client(dsn_for, worker: str, calls: Calls, stop: threading.Event):
    with (
        psycopg.connect(dsn_for("operator"), autocommit=True) as op,
        psycopg.connect(dsn_for("runner"), autocommit=True) as rn,
    ):
        while not stop.is_set():
            calls.timed(
                "enqueue",
                lambda: op.execute(
                    "SELECT run_id FROM scrinalia.enqueue(%s, '{}', 'CLI', 'rolling')", (worker,)
                ).fetchone(),
            )
            claimed = calls.timed(
                "claim_next",
                lambda: rn.execute(
                    "SELECT run_id, lease_token FROM scrinalia.claim_next('r-' || %s, '1 minute', %s)",
                    (worker, [worker]),
                ).fetchone(),
            )
            if claimed:
                calls.timed(
                    "finish",
                    lambda: rn.execute("SELECT status FROM scrinalia.finish(%s, %s, 'SUCCEEDED')", claimed).fetchone(),
                )


def _reader(dsn_for, calls: Calls, stop: threading.Event):
    with psycopg.connect(dsn_for("reader"), autocommit=True) as rd:
        while not stop.is_set():
            calls.timed(
                "views",
                lambda: (
                    rd.execute("SELECT * FROM scrinalia.worker_agenda").fetchall(),
                    rd.execute("SELECT * FROM scrinalia.worker_run_history ORDER BY run_id DESC LIMIT 5").fetchall(),
                ),
            )


def test_clients_see_no_error_while_migrate_reinstalls_the_code(db, db_dsn, role_logins, tmp_path, monkeypatch):
    workers = [make_worker(db, f"roll{i}") for i in range(CLIENTS)]

    def dsn_for(group):
        return psycopg.conninfo.make_conninfo(db_dsn, user=role_logins[group])

    calls, stop = Calls(), threading.Event()
    threads = [threading.Thread(target=_client, args=(dsn_for, w, calls, stop)) for w in workers]
    threads.append(threading.Thread(target=_reader, args=(dsn_for, calls, stop)))
    for t in threads:
        t.start()
    windows = []
    roots = [str(sql_variant(tmp_path)), str(sqlfiles.project_root())]
    digests = set()
    try:
        wait_for(lambda: calls.count() > 50, timeout=20, interval=0.02, what="the clients to get going")
        for k in range(MIGRATES):
            before = calls.count()
            monkeypatch.setenv("SCRINALIA_ROOT", roots[k % 2])
            code_before = code_digest(db)
            t0 = time.monotonic()
            assert m.migrate(db_dsn) == []
            windows.append((t0, time.monotonic()))
            assert code_digest(db) != code_before, "each migrate must change the code the clients call"
            digests.add(code_digest(db))
            wait_for(lambda: calls.count() > before + 20, timeout=20, interval=0.02, what="calls after the migrate")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert calls.errors == [], calls.errors[:5]
    assert len(digests) == 2
    overlapping = [e - s for s, e, _ in calls.done if any(s < we and e > ws for ws, we in windows)]
    assert len(overlapping) >= 2 * CLIENTS, "the clients must really run during the migrates"
    outside = sorted(e - s for s, e, _ in calls.done if not any(s < we and e > ws for ws, we in windows))
    took = sorted(we - ws for ws, we in windows)
    worst = {}
    for s_, e_, what in calls.done:
        if any(s_ < we and e_ > ws for ws, we in windows):
            worst[what] = max(worst.get(what, 0), e_ - s_)
    print("\nmax per call during a migrate (ms):", {k: round(v * 1000) for k, v in sorted(worst.items())})
    print(
        f"\n{MIGRATES} migrates, median {took[len(took) // 2]:.3f} s, max {took[-1]:.3f} s; {len(calls.done)} calls, "
        f"{len(overlapping)} overlapping a migrate: max {max(overlapping) * 1000:.0f} ms; "
        f"others p50 {outside[len(outside) // 2] * 1000:.1f} ms, max {outside[-1] * 1000:.0f} ms"
    )
