"""enqueue() writes its config out for its one run: it must resolve exactly as resolve_configs() does."""

from __future__ import annotations

import itertools
import json

from psycopg.types.json import Jsonb

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


def test_enqueue_resolves_every_layer_combination_as_resolve_configs(db):
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
            got = db.execute(
                "SELECT config, config_sources FROM scrinalia.enqueue(%s, %s)", (name, Jsonb(request))
            ).fetchone()
            want = db.execute(
                "SELECT config, sources FROM scrinalia.resolve_configs(ARRAY[%s], ARRAY[%s::jsonb])",
                (name, json.dumps(request)),
            ).fetchone()
            assert got == want, (DEFAULTS[d], SETTINGS[s], request)
            db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE worker_name = %s", (name,))
            compared += 1
    assert compared == len(REQUESTS) * len(combos)
