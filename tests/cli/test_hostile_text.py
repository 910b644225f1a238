"""No byte the database holds reaches the operator's terminal as a control sequence.

Text anybody can write through the SQL API (a runner's error, an operator's updated_by
or request, the owner's catalogue description, the last tick's author, a set-aside
error) is planted with every class of acting character, then every command that shows
it is run, in its plain and its JSON form: each character shows as a visible escape,
and the JSON is still the same document."""

from __future__ import annotations

import json
import unicodedata

import pytest
from psycopg.types.json import Jsonb

from helpers import cli, make_worker
from scrinalia_workers import text

# every class the issue names: ESC/CSI, OSC, carriage return, C1 (U+009B), DEL,
# bidi override (U+202E), zero-width, line separator, BOM
CLASSES = {
    "csi": "\x1b[31m",
    "osc": "\x1b]0;owned\x07",
    "cr": "\r",
    "c1": "\x9b",
    "del": "\x7f",
    "bidi": "\u202e",
    "isolate": "\u2066",
    "zero-width": "\u200b",
    "line-separator": "\u2028",
    "bom": "\ufeff",
    "backspace": "\x08",
}
HOSTILE = "x" + "".join(CLASSES.values()) + "y"


def _acting(s: str) -> list[str]:
    return sorted(
        {f"U+{ord(c):04X}" for c in s if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")} - {"U+000A"}
    )


@pytest.fixture
def planted(db):
    make_worker(db, "ocr")
    db.execute("UPDATE scrinalia.archive_workers SET description = %s WHERE worker_name = 'ocr'", (HOSTILE,))
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, request, updated_by,"
        " next_run_at, arm_error, arm_error_since, arm_retry_at)"
        " VALUES ('ocr', '* * * * *', 'UTC', %s, %s, now() + interval '1 hour', %s, now(), now() + interval '1 hour')",
        (Jsonb({"options": {"lang": HOSTILE}}), HOSTILE, HOSTILE),
    )
    db.execute("UPDATE scrinalia.scheduler_state SET last_tick_by = %s, last_tick_at = now()", (HOSTILE,))
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, error, created_at, started_at,"
        " finished_at, scheduled_for) VALUES ('ocr', 'MANUAL', 'FAILED', %s, now(), now(), now(), NULL),"
        " ('ocr', 'SCHEDULE', 'FAILED', %s, now(), now(), now(), date_trunc('minute', now()))",
        (HOSTILE, HOSTILE),
    )
    return db


COMMANDS = [
    ["status"],
    ["runs"],
    ["runs", "ocr"],
    ["runs", "ocr", "--timeline"],
    ["schedule", "get", "ocr"],
    ["worker", "show", "ocr"],
    ["worker", "list"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_no_command_lets_a_planted_character_act(planted, db_dsn, argv):
    r = cli(*argv, dsn=db_dsn)
    assert r.code == 0, r.err
    out = r.out + r.err
    assert _acting(out) == [], (argv, _acting(out))
    assert "\\x1b[31m" in out or "\\x1b" in out, out  # shown, not dropped


@pytest.mark.parametrize("argv", [a for a in COMMANDS if "--timeline" not in a], ids=" ".join)
def test_json_output_escapes_every_class_and_keeps_the_text(planted, db_dsn, argv):
    r = cli(*argv, "--json", dsn=db_dsn)
    assert r.code == 0, r.err
    assert _acting(r.out) == [], (argv, _acting(r.out))
    assert any(HOSTILE in s for s in _strings(json.loads(r.out)))  # the same text, in the same document


def _strings(doc: object) -> list[str]:
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in [k, *_strings(v)]]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return [doc] if isinstance(doc, str) else []


def test_an_error_line_with_planted_text_is_escaped(planted, db_dsn):
    r = cli("enqueue", HOSTILE, dsn=db_dsn)
    assert r.code != 0
    assert _acting(r.err) == [], r.err


def test_the_escape_covers_exactly_the_acting_characters():
    acting = [c for c in range(0x110000) if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")]
    missed = [hex(c) for c in acting if chr(c) not in "\n\t" and text.for_terminal(chr(c)) == chr(c)]
    assert missed == []
    for name, ch in CLASSES.items():
        assert _acting(text.for_terminal(ch)) == [], name
    assert text.for_terminal("naïve café ñ 日本") == "naïve café ñ 日本"
