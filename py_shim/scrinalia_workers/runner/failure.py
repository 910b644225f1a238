"""Describing a handler's failure as text the database will store.

A handler may raise anything: messages with NUL bytes (which PostgreSQL text cannot
hold), lone surrogates (an os.fsdecode'd file name, which UTF-8 cannot encode), 10 MB
of text, an exception whose __str__ itself raises. Whatever it raised, the runner gets
back a capped, printable error text and a fingerprint, and never an exception.
"""

from __future__ import annotations

import hashlib
import traceback
from typing import Any, cast

from scrinalia_workers.text import printable

MAX_ERROR_CHARS = 4000  # the whole error text stored in the ledger
MAX_MESSAGE_CHARS = 2000  # the exception's message within it (the traceback tail follows)
TRACEBACK_FRAMES = 3

EXPECTED_RETURN = "expected None, a str or a dict"


def cap(text: str, limit: int, original: int | None = None) -> str:
    """At most `limit` characters, saying about how many of the `original` were cut."""
    original = len(text) if original is None else original
    if len(text) <= limit and original <= len(text):
        return text
    kept = max(min(len(text), limit - 40), 0)  # room for the note
    return (text[:kept] + f" [... {max(original - kept, 1)} characters cut]")[:limit]


def _message(exc: BaseException) -> str:
    # str() may raise anything (even SystemExit) or return a non-str: never let it out
    try:
        msg = str(exc)
        return msg if type(msg) is str else str.__str__(msg)  # a str subclass's methods may lie
    except BaseException:
        return "<exception str() failed>"


def _type_name(exc: BaseException) -> str:
    try:
        return printable(str(type(exc).__qualname__))
    except BaseException:
        return "BaseException"


def fingerprint(*parts: str) -> str:
    """16 hex digits identifying a kind of failure (same kind, same fingerprint)."""
    data = "\x1f".join(parts).encode("utf-8", "backslashreplace")
    return hashlib.sha1(data).hexdigest()[:16]


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(error text, fingerprint) for an exception a handler raised.

    The text is "Type: message" and the last frames of the traceback; the
    fingerprint hashes the type and the place it was raised, not the message, so
    that the same bug with different data groups together.
    """
    name = _type_name(exc)
    try:
        frames = traceback.extract_tb(exc.__traceback__)
        tail = "".join(traceback.format_list(frames[-TRACEBACK_FRAMES:]))
        where = f"{frames[-1].filename}:{frames[-1].name}" if frames else ""
    except BaseException:
        tail, where = "", ""
    raw = _message(exc)
    # escape only what can be kept of a 10 MB message; the note counts raw characters
    msg = cap(printable(raw[:MAX_MESSAGE_CHARS]), MAX_MESSAGE_CHARS, original=len(raw))
    head = f"{name}: {msg}" if msg else name
    text = cap(f"{head}\n{printable(tail)}".strip(), MAX_ERROR_CHARS)
    try:
        module = str(type(exc).__module__)
    except BaseException:
        module = ""
    return text, fingerprint(f"{module}.{name}", where)


def check_return(value: object) -> tuple[str, str] | None:
    """None when a handler's return value means success, else (error text, fingerprint).

    None, a str or a dict is success (a str or dict is logged as a summary). Anything
    else fails the run: False, a number, a list, and a coroutine or generator, which
    mean the handler's body never ran (an async def, or a yield in it).
    """
    if value is None or isinstance(value, (str, dict)):
        return None
    kind = printable(type(value).__qualname__)
    if kind in ("coroutine", "generator"):
        try:
            cast(Any, value).close()  # no "never awaited" warning on stderr
        except BaseException:
            pass
    return f"handler returned {kind} ({EXPECTED_RETURN})", fingerprint("returned", kind)


def summary(value: object, limit: int = 200) -> str | None:
    """A successful handler's return value, as one capped line for the log."""
    if value is None:
        return None
    try:
        text = str.__str__(value) if isinstance(value, str) else repr(value)
        if type(text) is not str:
            text = str.__str__(text)
        return cap(" ".join(printable(text[: limit * 2]).split()), limit)
    except BaseException:
        return "<unprintable summary>"
