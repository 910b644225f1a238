"""Text on its way out of the process: every character kept, none able to act."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL and C1 controls: escaped, never stored raw.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """The text with lone surrogates and control characters (NUL too) backslash-escaped."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
