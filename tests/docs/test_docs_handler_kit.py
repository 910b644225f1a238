"""docs/handlers.md's test-kit example is the test tests/handler_kit/test_example.py runs,
character for character."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_example_is_the_one_that_runs():
    section = (ROOT / "docs" / "handlers.md").read_text().split("## Testing your handlers", 1)[1]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert block == (ROOT / "tests" / "handler_kit" / "test_example.py").read_text()
