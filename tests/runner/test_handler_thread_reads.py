"""The main thread reads the handler thread's queue (waiting, current) while the handler
thread takes runs off it: a read must never meet the queue mid-change (a RuntimeError
there abandoned the whole batch, its runs given back or left to their leases)."""

from __future__ import annotations

import sys

from runner_fakes import claimed

from scrinalia_workers.runner.handler_thread import HandlerThread
from scrinalia_workers.runner.wakeup import Wakeup
from scrinalia_workers.testkit.waiting import wait_for

BATCH = 300


def _quick(run: dict) -> None:
    return None


def test_waiting_and_current_read_while_the_thread_takes_runs():
    # the threads switch often (the default 5 ms slice let the handler thread take about
    # one run a slice): many reads meet a take, and the test ends in seconds
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        _reads_while_taking(HandlerThread(Wakeup(), max_threads=1))
    finally:
        sys.setswitchinterval(previous)


def _reads_while_taking(threads: HandlerThread) -> None:
    for batch in range(20):
        ids = [batch * BATCH + i for i in range(BATCH)]
        id_set = set(ids)
        threads.submit([(_quick, claimed(run_id, "w")) for run_id in ids])
        seen_waiting = []
        while threads.busy:  # the main thread's reads, as see_through makes them
            seen_waiting.append(threads.waiting)
            current = threads.current
            assert current is None or current.run_id in id_set
        done = []

        def all_posted(done=done) -> bool:
            done.extend(threads.finished())
            return len(done) >= BATCH

        wait_for(all_posted, timeout=30, what="every outcome posted")
        assert sorted(d.run.run_id for d in done) == ids
        assert all(d.outcome.status == "SUCCEEDED" for d in done)
        assert seen_waiting == sorted(seen_waiting, reverse=True)  # only ever fewer wait
