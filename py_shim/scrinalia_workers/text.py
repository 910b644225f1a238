"""Text on its way out of the process: every character kept, none able to act."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL and C1 controls: escaped, never stored raw.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """The text with lone surrogates and control characters (NUL too) backslash-escaped."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


# The characters a terminal may act on rather than show: C0 and C1 controls and DEL
# (Cc), format characters (Cf: bidi overrides and isolates, zero-width joiners, BOM),
# line and paragraph separators (Zl, Zp), and lone surrogates (Cs); those below U+0100,
# and the ranges above it that hold any
_ACTING = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]"
)


def for_terminal(text: str, keep: str = "\n\t") -> str:
    """`text` as a terminal can only show it: every character a terminal could act on
    (ESC and CSI sequences, carriage returns, C1 controls such as U+009B, bidi overrides
    such as U+202E, lone surrogates) replaced by a visible \\xNN or \\uNNNN escape, but
    those in `keep` (the output's own newlines and tabs)."""
    return _ACTING.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def for_json(text: str) -> str:
    """JSON text (as json.dumps writes it) with every acting character as a \\uNNNN escape:
    still the same JSON document, with nothing a terminal could act on."""
    return _ACTING.sub(lambda m: m.group() if m.group() in "\n" else f"\\u{ord(m.group()):04x}", text)


# What PostgreSQL shows of another login's session only to a superuser or a member of
# pg_read_all_stats (its application, client and start): said so, never printed as None.
HIDDEN = "hidden from this login (pg_read_all_stats)"
