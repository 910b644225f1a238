"""Every line the runner logs about a run, each defined once (line_specs.LineSpec),
written a batch at a time: a backlog of quick runs logs two lines a run, and the
general path was a third of the runner's own CPU per run.

The batch (runner/batch.py) calls these after it moved the runs: what a line says
comes from the typed run (runner/run.py), its state and its outcome.
"""

from __future__ import annotations

from collections.abc import Iterable

from scrinalia_workers.line_specs import LineSpec
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner.run import ClaimedRun
from scrinalia_workers.runner.run_states import RunState

CLAIMED = LineSpec("claimed", "info", [("run_id", int), ("worker", str), ("trigger", str), ("attempt", int)])
SUCCEEDED = LineSpec("finished", "info", [("run_id", int), ("worker", str), ("status", str)])
SUMMARISED = LineSpec("finished", "info", [("run_id", int), ("worker", str), ("status", str), ("summary", str)])
FAILED = LineSpec(
    "finished", "info", [("run_id", int), ("worker", str), ("status", str), ("error", str), ("fingerprint", str)]
)
INTERRUPTED = LineSpec(
    "interrupted", "info", [("run_id", int), ("worker", str), ("status", str), ("error", str), ("fingerprint", str)]
)
LEASE_LOST = LineSpec("lease lost", "warning", [("run_id", int), ("reason", str)])
UNREPORTED = LineSpec("report abandoned", "error", [("run_id", int), ("status", str), ("reason", str)])
RELEASED = LineSpec("released", "info", [("runs", str), ("reason", str)])
ERROR_LINE_CHARS = 500  # of the error's first line; the ledger keeps the whole text


def log_claimed(log: EventLog, runs: list[ClaimedRun]) -> None:
    CLAIMED.write(log, [(r.run_id, r.worker_name, r.trigger, r.attempt) for r in runs])


def log_lost(log: EventLog, runs: Iterable[ClaimedRun]) -> None:
    """A `lease lost` line per run whose lease a heartbeat found lost."""
    LEASE_LOST.write(log, [(r.run_id, f"lease lost: {r.lost_reason}") for r in runs])


def log_released(log: EventLog, runs: Iterable[ClaimedRun], reason: str) -> None:
    RELEASED.write(log, [(",".join(str(r.run_id) for r in runs), reason)])


def _spec_and_values(run: ClaimedRun) -> tuple[LineSpec, tuple]:
    """The line of a run that reached an end after its report: its spec and values."""
    o = run.outcome
    assert o is not None
    if run.state is RunState.LEASE_LOST:
        return LEASE_LOST, (run.run_id, f"lease lost: {run.lost_reason}")
    if run.state is RunState.UNREPORTED:
        return UNREPORTED, (run.run_id, o.status, run.lost_reason or "")
    if o.error:
        spec = INTERRUPTED if o.status == "INTERRUPTED" else FAILED
        return spec, (run.run_id, run.worker_name, o.status, o.error.splitlines()[0][:ERROR_LINE_CHARS], o.fingerprint)
    if o.summary:
        return SUMMARISED, (run.run_id, run.worker_name, o.status, o.summary)
    return SUCCEEDED, (run.run_id, run.worker_name, o.status)


def log_reported(log: EventLog, runs: Iterable[ClaimedRun]) -> None:
    """One line per run of a report, in the report's order: `finished` (or
    `interrupted`), `lease lost`, or `report abandoned`; a run of equal lines written
    together."""
    with log.batch():
        spec: LineSpec | None = None
        rows: list[tuple] = []
        for run in runs:
            this, values = _spec_and_values(run)
            if this is not spec and rows:
                assert spec is not None
                spec.write(log, rows)
                rows = []
            spec = this
            rows.append(values)
        if spec is not None and rows:
            spec.write(log, rows)
