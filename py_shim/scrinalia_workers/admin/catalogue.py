"""Worker catalogue files: read, check, register (scrinalia-workers worker register).

A file (JSON, or YAML for .yaml/.yml) holds one worker, a list of workers, or
{"workers": [...]}:

    workers:
      - name: ocr
        description: OCR of scanned pages
        engines: {tesseract: {engine_options: {psm: {type: integer}}}}
        presets: {fast: {options: {dpi: 150}}}
        options: {dpi: {type: integer}, lang: {type: string, values: [por, eng]}}
        default_config: {engine: tesseract, options: {dpi: 300, lang: por}}

Every check of scrinalia.register_worker and the table is made here first (name,
object types), and what would only fail later, at a request, too (option types and
values, presets and the default config against the options and engines), so a deploy
pipeline learns of a mistake at deploy time, with the file and the part named. The
whole file is registered through scrinalia.register_worker in one transaction.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from scrinalia_workers import inputs
from scrinalia_workers.errors import CatalogueError, InputError
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import admin as sql

NAME = re.compile(r"[a-z][a-z0-9_.-]{0,62}")  # as scrinalia.register_worker and the table's CHECK
WORKER_KEYS = ("name", "description", "engines", "presets", "options", "default_config")
OPTION_TYPES = ("integer", "number", "string", "boolean")
MAX_FILE_BYTES = 10 * 1024 * 1024


class _Bad(Exception):
    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}" if where else problem)


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


def _json_only(v: Any, where: str) -> None:
    """YAML can say more than JSON (dates, non-string keys, NaN): refuse that."""
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise _Bad(where, f"key {k!r} must be a string (quote it in YAML)")
            if problem := inputs.storable_text(k):
                raise _Bad(where, f"a key {problem}")
            _json_only(x, f"{where}.{k}" if where else k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _json_only(x, f"{where}[{i}]")
    elif isinstance(v, float) and not math.isfinite(v):
        raise _Bad(where, f"{v} is not a JSON number")
    elif isinstance(v, str) and (problem := inputs.storable_text(v)):
        raise _Bad(where, problem)
    elif v is not None and not isinstance(v, (str, int, float, bool)):
        raise _Bad(where, f"{_kind(v)} is not a JSON value (quote it in YAML)")


def _object(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise _Bad(where, f"must be an object, got {_kind(v)}")
    return v


def _only(d: dict, allowed: tuple[str, ...], where: str) -> None:
    for k in d:
        if k not in allowed:
            raise _Bad(where, f"unknown key {k!r} (allowed: {', '.join(allowed)})")


def _fits(spec: dict, value: Any) -> str | None:
    """What is wrong with a value for an option spec, like scrinalia.option_value_problem."""
    t = spec["type"]
    ok = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
    }[t]
    if not ok:
        return f"must be {'an' if t == 'integer' else 'a'} {t}, got {_kind(value)}"
    if "values" in spec and value not in spec["values"]:
        return f"must be one of {json.dumps(spec['values'])}, got {json.dumps(value)}"
    return None


def _option_specs(v: Any, where: str) -> dict:
    specs = _object(v, where)
    for name, spec in specs.items():
        at = f"{where}.{name}"
        spec = _object(spec, at)
        _only(spec, ("type", "values"), at)
        if spec.get("type") not in OPTION_TYPES:
            raise _Bad(f"{at}.type", f"must be one of {', '.join(OPTION_TYPES)}, got {json.dumps(spec.get('type'))}")
        if "values" in spec:
            if not isinstance(spec["values"], list) or not spec["values"]:
                raise _Bad(f"{at}.values", "must be a non-empty list")
            for i, x in enumerate(spec["values"]):
                problem = _fits({"type": spec["type"]}, x)
                if problem:
                    raise _Bad(f"{at}.values[{i}]", problem)
    return specs


def _option_values(v: Any, specs: dict, where: str) -> None:
    for k, x in _object(v, where).items():
        if k not in specs:
            raise _Bad(where, f"unknown option {k!r} (the worker's options: {', '.join(specs) or 'none'})")
        problem = _fits(specs[k], x)
        if problem:
            raise _Bad(f"{where}.{k}", problem)


def check_worker(w: Any, where: str) -> dict:
    """The worker, with every part defaulted to {}; raises _Bad naming the part."""
    w = _object(w, where)
    name = w.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _Bad(
            f"{where}.name",
            f"invalid worker name {json.dumps(name)}: 1 to 63 characters, a lowercase "
            "letter, then lowercase letters, digits, _ . or -",
        )
    where = f"{where} ({name})"
    _only(w, WORKER_KEYS, where)
    description = w.get("description", "")
    if not isinstance(description, str):
        raise _Bad(f"{where}.description", f"must be a string, got {_kind(description)}")
    options = _option_specs(w.get("options", {}), f"{where}.options")
    engines = _object(w.get("engines", {}), f"{where}.engines")
    for e, spec in engines.items():
        at = f"{where}.engines.{e}"
        _only(_object(spec, at), ("engine_options",), at)
        _option_specs(spec.get("engine_options", {}), f"{at}.engine_options")
    presets = _object(w.get("presets", {}), f"{where}.presets")
    for p, spec in presets.items():
        at = f"{where}.presets.{p}"
        _only(_object(spec, at), ("options", "engine_options"), at)
        if "options" in spec:
            _option_values(spec["options"], options, f"{at}.options")
        if "engine_options" in spec:
            _object(spec["engine_options"], f"{at}.engine_options")
    default = _object(w.get("default_config", {}), f"{where}.default_config")
    _only(default, ("engine", "preset", "options", "engine_options"), f"{where}.default_config")
    if "engine" in default and default["engine"] not in engines:
        raise _Bad(
            f"{where}.default_config.engine",
            f"unknown engine {json.dumps(default['engine'])} (engines: {', '.join(engines) or 'none'})",
        )
    if "preset" in default and default["preset"] not in presets:
        raise _Bad(
            f"{where}.default_config.preset",
            f"unknown preset {json.dumps(default['preset'])} (presets: {', '.join(presets) or 'none'})",
        )
    if "options" in default:
        _option_values(default["options"], options, f"{where}.default_config.options")
    if "engine_options" in default:
        if "engine" not in default:
            raise _Bad(f"{where}.default_config.engine_options", "given without an engine")
        _option_values(
            default["engine_options"],
            engines[default["engine"]].get("engine_options", {}),
            f"{where}.default_config.engine_options",
        )
    return {
        "name": name,
        "description": description,
        "engines": engines,
        "presets": presets,
        "options": options,
        "default_config": default,
    }


def parse(text: str, label: str, yaml_syntax: bool) -> list[dict]:
    """The workers of a file's text; CatalogueError naming `label` and the bad part."""
    try:
        try:
            doc = inputs.parse(text, label, yaml_syntax)
        except InputError as e:
            raise CatalogueError(str(e)) from None
        _json_only(doc, "")
        if isinstance(doc, dict) and "workers" in doc:
            _only(doc, ("workers",), "")
            items, path = doc["workers"], "workers"
        elif isinstance(doc, dict):
            items, path = [doc], None
        else:
            items, path = doc, ""
        if not isinstance(items, list) or not items:
            raise _Bad(
                path or "",
                'expected a worker, a list of workers or {"workers": [...]}, '
                f"got {_kind(items) if items != [] else 'an empty list'}",
            )
        workers: list[dict] = []
        seen: dict[str, str] = {}
        for i, w in enumerate(items):
            where = "worker" if path is None else f"{path}[{i}]"
            checked = check_worker(w, where)
            if checked["name"] in seen:
                raise _Bad(where, f"worker {checked['name']!r} is also {seen[checked['name']]}")
            seen[checked["name"]] = where
            workers.append(checked)
        return workers
    except _Bad as e:
        raise CatalogueError(f"{label}: {e}") from None


def read(path: str) -> list[dict]:
    """The workers of a file (`-`: standard input, JSON or YAML), at most MAX_FILE_BYTES read."""
    try:
        text = inputs.read_text(path, MAX_FILE_BYTES)
    except InputError as e:
        raise CatalogueError(str(e)) from None
    return parse(text, inputs.label_of(path), yaml_syntax=path == "-" or inputs.is_yaml(path))


def register(
    conn: psycopg.Connection, workers: list[dict], label: str, *, dry_run: bool = False
) -> list[tuple[str, bool]]:
    """All or nothing, through scrinalia.register_worker: (name, was_new) per worker;
    `dry_run` runs every check of the database and rolls back."""
    done = []
    with conn.transaction(force_rollback=dry_run):
        for w in workers:
            new = one(conn.execute(sql.IS_NEW_WORKER, (w["name"],)))[0]
            try:
                conn.execute(
                    sql.REGISTER_WORKER,
                    (
                        w["name"],
                        Jsonb(w["engines"]),
                        Jsonb(w["presets"]),
                        Jsonb(w["options"]),
                        Jsonb(w["default_config"]),
                        w["description"],
                    ),
                )
            except psycopg.Error as e:
                e.add_note(f"{label}: worker {w['name']!r}")
                raise
            done.append((w["name"], new))
    return done
