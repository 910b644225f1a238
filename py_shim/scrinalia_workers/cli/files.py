"""The schedule file of `schedule import`: JSON or YAML, read and checked for syntax only."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from scrinalia_workers import errors, inputs


def read_schedule_file(path: str) -> tuple[str, str]:
    """(label, the JSON array) of a schedule file: a JSON or YAML (.yaml/.yml; `-` reads
    either from stdin) list of {worker_name, cron, timezone?, request?, enabled?}, or
    {"schedules": [...]}. Only the file's syntax is checked here: every element is
    scrinalia.put_schedules' to judge, which names the one it refuses."""
    label = inputs.label_of(path)
    doc: Any = inputs.parse(inputs.read_text(path), label, yaml_syntax=path == "-" or inputs.is_yaml(path))
    if isinstance(doc, dict) and set(doc) == {"schedules"}:
        doc = doc["schedules"]
    if not isinstance(doc, list):
        raise errors.ScrinaliaError(
            f'{label}: expected a list of schedules or {{"schedules": [...]}}, got {type(doc).__name__}'
        )
    _storable(doc, label, "")

    def not_json(v: object) -> NoReturn:  # YAML can say more than JSON: a date, a set
        raise TypeError(f"{v!r} is not a JSON value (quote it in YAML)")

    try:
        return label, json.dumps(doc, allow_nan=False, default=not_json)
    except (TypeError, ValueError) as e:
        raise errors.ScrinaliaError(f"{label}: {e}") from None


def _storable(v: Any, label: str, where: str) -> None:
    """Every text the file holds is one PostgreSQL can store: named where it is not."""
    if isinstance(v, dict):
        for k, x in v.items():
            _storable(k, label, where)
            _storable(x, label, f"{where}.{k}" if where else str(k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _storable(x, label, f"{where}[{i}]")
    elif isinstance(v, str) and (problem := inputs.storable_text(v)):
        raise errors.InputError(f"{label}: {where or 'a value'} {problem}")
