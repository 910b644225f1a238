"""The two lines every run logs, `claimed` and `finished`, written a batch at a time.

A backlog of quick runs logs two lines a run, and EventLog's general path (a timestamp,
a dict and the JSON encoder a line) was a third of the runner's own CPU per run. With
--json the usual lines are formatted here instead: one timestamp per batch (its lines
are written together), the fields in EventLog's order and its encoding (ensure_ascii,
", " and ": "), so each line reads exactly as EventLog would have written it, and the
batch goes out in one write. Plain text, a log of another type (the tests' recorders)
and the unusual lines (an error, a summary, an interruption) go through the log itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from scrinalia_workers.logs import LEVELS, EventLog, stamp


def _formats_here(log: EventLog) -> bool:
    return type(log) is EventLog and log.json_lines and LEVELS["info"] >= log.threshold


def _stamp() -> str:
    return _quote(stamp())


def log_claimed(log: EventLog, runs: list[dict]) -> None:
    """One `claimed` line per run: run_id, worker, trigger, attempt."""
    if not _formats_here(log):
        with log.batch():
            for run in runs:
                log(
                    "claimed",
                    run_id=run["run_id"],
                    worker=run["worker_name"],
                    trigger=run["trigger"],
                    attempt=run["attempt"],
                )
        return
    ts = _stamp()
    log.write_text(
        "".join(
            f'{{"ts": {ts}, "event": "claimed", "level": "info", "run_id": {int(run["run_id"])}, '
            f'"worker": {_quote(run["worker_name"])}, "trigger": {_quote(run["trigger"])}, '
            f'"attempt": {int(run["attempt"])}}}\n'
            for run in runs
        ),
    )


def log_finished(log: EventLog, reported: Iterable[tuple[dict, Any]]) -> None:
    """One `finished` (or `interrupted`) line per reported (run, outcome), in order."""
    fast = _formats_here(log)
    ts = _stamp() if fast else ""
    pending: list[str] = []
    with log.batch():
        for run, o in reported:
            if fast and o.status == "SUCCEEDED" and not o.error and not o.summary:
                pending.append(
                    f'{{"ts": {ts}, "event": "finished", "level": "info", "run_id": {int(run["run_id"])}, '
                    f'"worker": {_quote(run["worker_name"])}, "status": "SUCCEEDED"}}\n'
                )
                continue
            if pending:  # the lines before this one first: the order is the report's
                log.write_text("".join(pending))
                pending = []
            fields: dict[str, Any] = {}
            if o.error:
                fields = {"error": o.error.splitlines()[0][:500], "fingerprint": o.fingerprint}
            elif o.summary:
                fields = {"summary": o.summary}
            log(
                "interrupted" if o.status == "INTERRUPTED" else "finished",
                run_id=run["run_id"],
                worker=run["worker_name"],
                status=o.status,
                **fields,
            )
        if pending:
            log.write_text("".join(pending))
