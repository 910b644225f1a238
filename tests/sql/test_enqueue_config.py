"""The config rule (config_of(), sql/10_catalogue.sql) as enqueue() and resolve_configs()
apply it, against the rule as docs/sql-api.md states it, written out here in Python:
every layer shape, every source."""

from __future__ import annotations

import itertools
import json

from psycopg.types.json import Jsonb

from helpers import raises_sqlstate

OPTION_SPECS = {"dpi": {"type": "integer"}, "lang": {"type": "string"}, "deskew": {"type": "boolean"}}
ENGINES = {
    "tesseract": {"engine_options": {"psm": {"type": "integer"}, "oem": {"type": "integer"}}},
    "kraken": {"engine_options": {"psm": {"type": "integer"}}},
}
PRESETS = {
    "archival": {"options": {"dpi": 600}, "engine_options": {"oem": 1}},
    "odd": {"options": "not an object", "engine_options": ["nor", "this"]},
    "empty": {},
}
# each layer in the shapes the rule tells apart: absent, the key given, parts that are
# not objects (a stale or hand-written row), each option from each layer
DEFAULTS = [
    {},
    {"engine": "tesseract", "options": {"dpi": 300, "lang": "por"}},
    {"engine": "kraken", "preset": "archival", "options": {"dpi": 200}, "engine_options": {"psm": 3}},
    {"preset": "odd", "options": [1, 2], "engine_options": "x"},
]
SETTINGS = [
    None,
    {},
    {"options": {"lang": "eng", "deskew": True}},
    {"engine": "tesseract", "preset": "empty", "engine_options": {"oem": 3}},
    {"preset": "archival", "options": 7},
    {"options": {"dpi": 100, "lang": "eng"}, "engine_options": {"oem": 2}},
]
REQUESTS = [
    {},
    {"options": {"dpi": 150}},
    {"preset": "archival", "options": {"deskew": False}},
    {"engine": "tesseract", "engine_options": {"psm": 6}},
    {"engine": "kraken", "preset": "odd"},
]


def _obj(layer: dict, part: str) -> dict:
    value = layer.get(part)
    return value if isinstance(value, dict) else {}


def expected(default: dict, settings: dict | None, presets: dict, request: dict) -> tuple[dict, dict]:
    """request > settings > signature default, part by part; a preset's options between
    the settings and the request's; engine and preset taken whole from the first layer
    that has them; a part that is not an object contributes nothing."""
    d, s, q = default, settings or {}, request
    layers = (("request", q), ("settings", s), ("default", d))
    head, sources = {}, {}
    for key in ("engine", "preset"):
        for source, layer in layers:
            if key in layer:
                head[key], sources[key] = layer[key], source
                break
    chosen = head.get("preset")
    # ->> of the preset's value: a string as itself, any other JSON as its text
    pv = presets.get(chosen if isinstance(chosen, str) else json.dumps(chosen), {}) if chosen is not None else {}
    pv = pv if isinstance(pv, dict) else {}
    config = dict(head)
    for part in ("options", "engine_options"):
        order = (
            ("default", _obj(d, part)),
            ("settings", _obj(s, part)),
            ("preset", _obj(pv, part)),
            ("request", _obj(q, part)),
        )
        merged, from_ = {}, {}
        for source, values in order:
            for k, v in values.items():
                merged[k], from_[k] = v, source
        config[part], sources[part] = merged, from_
    return config, sources


def test_enqueue_and_resolve_configs_resolve_every_layer_combination_by_the_rule(db):
    combos = list(itertools.product(range(len(DEFAULTS)), range(len(SETTINGS))))
    for d, s in combos:
        name = f"cfg{d}{s}"
        db.execute(
            "SELECT scrinalia.register_worker(%s, %s, %s, %s, %s)",
            (name, Jsonb(ENGINES), Jsonb(PRESETS), Jsonb(OPTION_SPECS), Jsonb(DEFAULTS[d])),
        )
        if SETTINGS[s] is not None:  # written as is: a row no validation would let in today
            db.execute(
                "INSERT INTO scrinalia.archive_worker_settings (worker_name, settings) VALUES (%s, %s)",
                (name, Jsonb(SETTINGS[s])),
            )
    compared = 0
    for request in REQUESTS:
        for d, s in combos:
            name = f"cfg{d}{s}"
            want = expected(DEFAULTS[d], SETTINGS[s], PRESETS, request)
            got = db.execute(
                "SELECT config, config_sources FROM scrinalia.enqueue(%s, %s)", (name, Jsonb(request))
            ).fetchone()
            assert got == want, (DEFAULTS[d], SETTINGS[s], request)
            got = db.execute(
                "SELECT config, sources FROM scrinalia.resolve_configs(ARRAY[%s], ARRAY[%s::jsonb])",
                (name, json.dumps(request)),
            ).fetchone()
            assert got == want, (DEFAULTS[d], SETTINGS[s], request)
            db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE worker_name = %s", (name,))
            compared += 1
    assert compared == len(REQUESTS) * len(combos)


def test_enqueue_checks_in_its_order_and_answers_with_the_same_errors(db):
    db.execute("SELECT scrinalia.register_worker('ok', '{}', '{}', %s)", (Jsonb(OPTION_SPECS),))
    long_name = "x" * 201
    cases = [
        # the worker first, then the request, then requested_by, then the slot
        (("nobody", {}, "MANUAL", long_name), "SW001", "unknown worker 'nobody'"),
        ((None, {}, "MANUAL", None), "SW001", "unknown worker NULL"),
        (("nobody", {"options": {"dpi": 1}}, "MANUAL", long_name), "SW001", "unknown worker 'nobody'"),
        (("ok", {"options": {"dpi": "high"}}, "MANUAL", long_name), "SW002", "invalid request for worker 'ok'"),
        (("ok", {}, "MANUAL", long_name), "SW002", "requested_by is 201 characters long: at most 200"),
        (("ok", {}, "SCHEDULE", None), "SW002", "enqueue takes trigger MANUAL or CLI, not SCHEDULE"),
    ]
    for args, sqlstate, fragment in cases:
        with raises_sqlstate(sqlstate, fragment):
            db.execute("SELECT scrinalia.enqueue(%s, %s, %s, %s)", (args[0], Jsonb(args[1]), args[2], args[3]))
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok', '{}', 'MANUAL', %s)", ("y" * 200,)).fetchone()[0]
    with raises_sqlstate("SW010", f"worker 'ok' is busy: run #{run_id} QUEUED (MANUAL)"):
        db.execute("SELECT scrinalia.enqueue('ok', '{}', 'CLI')")
