"""The runner's cheap paths read exactly as the general ones: the per-run lines written
a batch at a time (runner/run_lines.py) as EventLog writes them, and the claimed row
fetched in binary as the same row read in text."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest

from helpers import make_worker, run_row, scheduled_run
from scrinalia_workers.line_specs import LineSpec
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner import run_lines
from scrinalia_workers.runner.handlers import Outcome
from scrinalia_workers.runner.ledger import Ledger, _json_loads
from scrinalia_workers.runner.run import ClaimedRun
from scrinalia_workers.runner.run_lines import log_claimed, log_reported
from scrinalia_workers.runner.run_states import RunState

# names a database never holds (its CHECK), but a line must survive anything
HOSTILE = ["ocr", 'a"b\\c', "line\nbreak", "é漢字\u2028", "\x1b[31mred", '{"ts": 1}']


def _runs() -> list[ClaimedRun]:
    return [
        ClaimedRun.from_row(
            {
                "run_id": 10 + i,
                "worker_name": name,
                "trigger": "SCHEDULE" if i % 2 else 'MAN"UAL',
                "attempt": 1 + i % 3,
                "lease_token": None,
            }
        )
        for i, name in enumerate(HOSTILE)
    ]


def _lines(write) -> list[str]:
    out = io.StringIO()
    write(EventLog(json_lines=True, stream=out))
    return [
        json.dumps({**json.loads(line), "ts": "T"}) + "|" + line.split('"event"', 1)[1]
        for line in out.getvalue().splitlines()
    ]


def _general(event_fields: list[tuple[str, dict]]):
    def write(log: EventLog) -> None:
        for event, fields in event_fields:
            log(event, **fields)

    return write


def test_claimed_lines_are_eventlogs_own():
    runs = _runs()
    expected = _general(
        [
            (
                "claimed",
                {"run_id": r.run_id, "worker": r.worker_name, "trigger": r.trigger, "attempt": r.attempt},
            )
            for r in runs
        ]
    )
    got = _lines(lambda log: log_claimed(log, runs))
    assert got == _lines(expected)
    assert len(got) == len(runs)


def test_finished_lines_are_eventlogs_own_in_report_order():
    runs = _runs()
    outcomes = [
        Outcome("SUCCEEDED"),
        Outcome("FAILED", "disk 3 full\nsecond line", "fp"),
        Outcome("SUCCEEDED"),
        Outcome("SUCCEEDED", summary="7 pages"),
        Outcome("INTERRUPTED", "runner shut down", "runner-shutdown"),
        Outcome("SUCCEEDED"),
    ]
    ends = [RunState.REPORTED] * len(runs)
    ends[2], ends[5] = RunState.LEASE_LOST, RunState.UNREPORTED
    expected: list[tuple[str, dict]] = []
    for r, o, end in zip(runs, outcomes, ends):
        r.move(RunState.HANDED)
        r.move(RunState.DONE, outcome=o, at=0.0)
        r.move(end, reason=None if end is RunState.REPORTED else "the run is\nCANCELLED")
        if end is RunState.LEASE_LOST:
            expected.append(("lease lost", {"run_id": r.run_id, "reason": "lease lost: the run is\nCANCELLED"}))
            continue
        if end is RunState.UNREPORTED:
            expected.append(
                ("report abandoned", {"run_id": r.run_id, "status": o.status, "reason": "the run is\nCANCELLED"})
            )
            continue
        fields = {"run_id": r.run_id, "worker": r.worker_name, "status": o.status}
        if o.error:
            fields |= {"error": o.error.splitlines()[0], "fingerprint": o.fingerprint}
        elif o.summary:
            fields |= {"summary": o.summary}
        expected.append(("interrupted" if o.status == "INTERRUPTED" else "finished", fields))

    def general(log: EventLog) -> None:
        levels = {"lease lost": "warning", "report abandoned": "error"}
        for event, fields in expected:
            log(event, level=levels.get(event, "info"), **fields)

    got = _lines(lambda log: log_reported(log, runs))
    assert got == _lines(general)
    assert [json.loads(line.split("|")[0])["run_id"] for line in got] == [r.run_id for r in runs]


@pytest.mark.parametrize(
    "spec", [v for v in vars(run_lines).values() if isinstance(v, LineSpec)], ids=lambda spec: spec.event
)
def test_every_line_spec_writes_eventlogs_own_line(spec):
    """Each line is defined once: its fast path is EventLog's line, whatever the values."""
    for value in [*HOSTILE, None]:
        row = [7 if kind is int else value for kind in spec.kinds]
        fields = dict(zip(spec.names, row))
        assert _lines(lambda log: spec.write(log, [row])) == _lines(
            lambda log: log(spec.event, level=spec.level, **fields)
        )


def test_plain_text_and_quiet_logs_take_the_general_path():
    runs = _runs()[:2]
    plain = io.StringIO()
    log_claimed(EventLog(stream=plain), runs)
    assert [line.split(" ", 1)[1] for line in plain.getvalue().splitlines()] == [
        'INFO claimed run_id=10 worker=ocr trigger=MAN"UAL attempt=1',
        'INFO claimed run_id=11 worker=a"b\\c trigger=SCHEDULE attempt=2',
    ]
    quiet = io.StringIO()
    log_claimed(EventLog(json_lines=True, level="warning", stream=quiet), runs)
    runs[0].move(RunState.HANDED)
    runs[0].move(RunState.DONE, outcome=Outcome("SUCCEEDED"), at=0.0)
    runs[0].move(RunState.REPORTED)
    log_reported(EventLog(json_lines=True, level="warning", stream=quiet), runs[:1])
    assert quiet.getvalue() == ""


def test_the_claimed_row_in_binary_is_the_row_in_text(db, db_dsn):
    make_worker(db, "ocr")
    make_worker(db, "pdf")
    scheduled = scheduled_run(db, "ocr")  # scheduled_for, trigger SCHEDULE
    manual = db.execute(
        "SELECT run_id FROM scrinalia.enqueue('pdf', %s::jsonb)", (json.dumps({"preset": "fast"}),)
    ).fetchone()[0]
    ledger = Ledger(db_dsn, "r1", timedelta(seconds=30), EventLog(stream=io.StringIO()))
    try:
        claimed = {run.run_id: run.row for run in ledger.claim(None, 10)}
    finally:
        ledger.close()
    assert set(claimed) == {scheduled, manual}
    for run_id, run in claimed.items():
        # the claim's row: the ledger's, but the columns it gained after worker_run_v1
        text = {k: v for k, v in run_row(db, run_id).items() if k != "catch_up"}
        assert run == text
        assert {k: type(v) for k, v in run.items()} == {k: type(v) for k, v in text.items()}
    assert claimed[scheduled]["trigger"] == "SCHEDULE" and claimed[scheduled]["status"] == "RUNNING"


def test_the_json_of_a_claimed_row_parses_as_json_loads():
    for text in ['{"a": [1, 2.5, "\\u00e9"], "b": null}', "{}", "[]", ' {"a": 1} ', '"x"', '{"é": "漢"}']:
        for data in (text.encode(), text):
            assert _json_loads(data) == json.loads(text)
    for bad in [b'{"a": 1} x', b"{", b""]:
        with pytest.raises(json.JSONDecodeError):
            _json_loads(bad)
