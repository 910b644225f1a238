"""The schedule file of `schedule import`: JSON or YAML, read and checked for syntax only."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from scrinalia_workers import errors

# 100,000 schedules are about 8 MiB of JSON
SCHEDULE_FILE_MAX_BYTES = 64 * 1024 * 1024


def read_schedule_file(path: str) -> tuple[str, str]:
    """(label, the JSON array) of a schedule file: a JSON or YAML (.yaml/.yml; `-` reads
    either from stdin) list of {worker_name, cron, timezone?, request?, enabled?}, or
    {"schedules": [...]}. Only the file's syntax is checked here: every element is
    scrinalia.put_schedules' to judge, which names the one it refuses."""
    label = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, "rb") as f:
                raw = f.read(SCHEDULE_FILE_MAX_BYTES + 1)
            if len(raw) > SCHEDULE_FILE_MAX_BYTES:
                raise errors.ScrinaliaError(f"{label}: larger than {SCHEDULE_FILE_MAX_BYTES // 2**20} MiB")
            text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.ScrinaliaError(f"{label}: not UTF-8 text") from None
    except OSError as e:
        raise errors.ScrinaliaError(f"{label}: cannot read it: {e.strerror or e}") from None
    doc: Any
    if path == "-" or path.lower().endswith((".yaml", ".yml")):
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            raise errors.ScrinaliaError(f"{label}: not valid YAML: {getattr(e, 'problem', None) or e}{at}") from None
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise errors.ScrinaliaError(
                f"{label}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
            ) from None
    if isinstance(doc, dict) and set(doc) == {"schedules"}:
        doc = doc["schedules"]
    if not isinstance(doc, list):
        raise errors.ScrinaliaError(
            f'{label}: expected a list of schedules or {{"schedules": [...]}}, got {type(doc).__name__}'
        )

    def not_json(v: object) -> NoReturn:  # YAML can say more than JSON: a date, a set
        raise TypeError(f"{v!r} is not a JSON value (quote it in YAML)")

    try:
        return label, json.dumps(doc, allow_nan=False, default=not_json)
    except (TypeError, ValueError) as e:
        raise errors.ScrinaliaError(f"{label}: {e}") from None
