"""A minimal LISTEN-woken runner for the latency benchmark (an empty handler).

It does what a runner does between runs: LISTEN scrinalia_runs, claim until
claim_next returns nothing, then sleep until a NOTIFY arrives or the next
not_before passes (scrinalia.next_claimable_at), capped by a poll interval.
Used when the reference runner (scrinalia_workers.runner) is not installed.

    python -m bench.notify_runner --dsn DSN [--runner-id ID] [--poll 5]
"""

from __future__ import annotations

import argparse
import signal
import sys
from datetime import UTC, datetime

from scrinalia_workers.gateway.connection import connect

CLAIM_SQL = "SELECT run_id, lease_token FROM scrinalia.claim_next(%s, '5 minutes'::interval)"
FINISH_SQL = "SELECT status FROM scrinalia.finish(%s, %s, 'SUCCEEDED')"


def serve(dsn: str, runner_id: str, poll: float) -> None:
    def _stop(*_):
        raise KeyboardInterrupt  # out of the LISTEN wait at once; main() exits 0

    signal.signal(signal.SIGTERM, _stop)
    with connect(dsn, application_name=f"bench-notify-runner {runner_id}") as c:
        c.execute("LISTEN scrinalia_runs")
        print("ready", flush=True)
        while True:
            row = c.execute(CLAIM_SQL, (runner_id,)).fetchone()
            if row is not None:
                c.execute(FINISH_SQL, row)  # the empty handler ran in between
                continue
            nxt = c.execute("SELECT scrinalia.next_claimable_at()").fetchone()[0]
            wait = poll
            if nxt is not None:
                wait = max(0.0, min(poll, (nxt - datetime.now(UTC)).total_seconds()))
            # any notification is a reason to try a claim again
            for _ in c.notifies(timeout=wait, stop_after=1):
                pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.notify_runner")
    p.add_argument("--dsn", required=True)
    p.add_argument("--runner-id", default="bench-notify")
    p.add_argument("--poll", type=float, default=5.0, help="longest sleep without a NOTIFY (s)")
    args = p.parse_args(argv)
    try:
        serve(args.dsn, args.runner_id, args.poll)
    except KeyboardInterrupt:
        pass
    except Exception as e:
        print(f"notify_runner: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
