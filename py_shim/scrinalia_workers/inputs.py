"""Files an operator hands us (a worker catalogue, a schedule list): bounded in the bytes
read, in their structure and so in the time their parse takes.

A size read from the file system proves nothing (a FIFO, /dev/zero, stdin have none):
the bytes actually read are counted. YAML is parsed by libyaml when installed, still
some hundred times slower than JSON, so YAML has a lower cap than JSON; its aliases are
refused outright (a few hundred bytes of nested aliases expand to billions of nodes),
and any document nested deeper than MAX_DEPTH is refused before it is built.
"""

from __future__ import annotations

import json
import sys
from typing import Any, BinaryIO

from scrinalia_workers.errors import InputError

MAX_JSON_BYTES = 64 * 1024 * 1024  # 100,000 schedules are about 8 MiB of JSON
MAX_YAML_BYTES = 1024 * 1024  # parsed in a few seconds; larger files are JSON's job
MAX_DEPTH = 64
_CHUNK = 1024 * 1024


def _mib(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB"


def _read_at_most(f: BinaryIO, limit: int, label: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = f.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise InputError(f"{label}: larger than {_mib(limit)}")


def read_text(path: str, limit: int = MAX_JSON_BYTES) -> str:
    """The UTF-8 text of `path` (`-`: standard input), at most `limit` bytes of it read."""
    label = label_of(path)
    try:
        if path == "-":
            raw = _read_at_most(sys.stdin.buffer, limit, label)
        else:
            with open(path, "rb") as f:
                raw = _read_at_most(f, limit, label)
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{label}: not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"{label}: cannot read it: {e.strerror or e}") from None


def label_of(path: str) -> str:
    return "<stdin>" if path == "-" else path


def is_yaml(path: str) -> bool:
    return path.lower().endswith((".yaml", ".yml"))


def parse(text: str, label: str, yaml_syntax: bool) -> Any:
    """The document in `text`: JSON, or YAML (of which JSON is a part) when `yaml_syntax`.

    Refused with an InputError naming `label`: bad syntax (with its line and column), YAML
    longer than MAX_YAML_BYTES, a YAML alias, nesting deeper than MAX_DEPTH."""
    if yaml_syntax:
        stripped = text.lstrip()
        if stripped[:1] in ("[", "{"):  # JSON written to a YAML file or stdin: parse it as such
            try:
                return _json(text, label)
            except InputError:
                pass
        return _yaml(text, label)
    return _json(text, label)


def _json(text: str, label: str) -> Any:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{label}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise InputError(f"{label}: nested deeper than {MAX_DEPTH} levels") from None
    if _depth(doc) > MAX_DEPTH:
        raise InputError(f"{label}: nested deeper than {MAX_DEPTH} levels")
    return doc


def _depth(doc: Any) -> int:
    deepest, todo = 0, [(doc, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _yaml(text: str, label: str) -> Any:
    import yaml

    if len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
        raise InputError(f"{label}: YAML larger than {_mib(MAX_YAML_BYTES)}: write a file this large as JSON")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                at = f", at line {mark.line + 1} column {mark.column + 1}" if mark else ""
                raise InputError(f"{label}: YAML aliases (*{event.anchor}) are not accepted{at}: write the value out")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError(f"{label}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise InputError(f"{label}: not valid YAML: {getattr(e, 'problem', None) or e}{at}") from None
    except RecursionError:
        raise InputError(f"{label}: nested deeper than {MAX_DEPTH} levels") from None


def storable_text(value: str) -> str | None:
    """Why PostgreSQL cannot store `value` as text, or None when it can."""
    if "\x00" in value:
        return "contains a NUL character, which PostgreSQL text cannot hold"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate, which is not UTF-8"
    return None
