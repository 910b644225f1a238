"""The pages' one way to make HTML: a template whose every value is escaped.

`html(template, **values)` fills `{name}` fields; a value is escaped unless it is
already `Html` (made by html() itself), so no text read from the database reaches a
page raw. Escaping goes further than html.escape: a control character, a bidi
override, a zero-width or line-separator character shows as a visible \\xNN or
\\uNNNN, as at the terminal (text.for_terminal), and a newline or tab as \\n or \\t.
"""

from __future__ import annotations

import html as _html
import string
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from scrinalia_workers.text import for_terminal


class Html(str):
    """Markup this module made: inserted as is."""

    __slots__ = ()


_FIELDS = string.Formatter()


def shown(value: Any) -> str:
    """A value as the text a cell shows: '-' for none, nothing in it able to act."""
    if value is None:
        return "-"
    text = str(value).replace("\n", "\\n").replace("\t", "\\t")
    return for_terminal(text, keep="")


def esc(value: Any) -> Html:
    if isinstance(value, Html):
        return value
    return Html(_html.escape(shown(value), quote=True))


def html(template: str, **values: Any) -> Html:
    """`template` with each {name} replaced by its value, escaped (Html kept as is).
    Only plain names: no attribute or index lookups reach into a value."""
    out = []
    for literal, field, spec, conversion in _FIELDS.parse(template):
        out.append(literal)
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(f"template field {field!r}: plain names only")
        out.append(esc(values[field]))
    return Html("".join(out))


def join(parts: Iterable[Html | str], sep: str = "") -> Html:
    return Html(sep.join(esc(p) for p in parts))


def href(path: str, **query: Any) -> str:
    """A link to one of our pages (the caller escapes it as an attribute, through html())."""
    given = {k: v for k, v in query.items() if v is not None}
    return path + ("?" + urlencode(given) if given else "")
