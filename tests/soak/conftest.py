"""The soak reads the reliability suite's invariants and infrastructure (infra.py):
their folder on the path, as soak.py puts it when run as a program."""

from __future__ import annotations

import sys
from pathlib import Path

_RELIABILITY = str(Path(__file__).resolve().parent.parent / "reliability")
if _RELIABILITY not in sys.path:
    sys.path.insert(0, _RELIABILITY)
