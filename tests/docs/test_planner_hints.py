"""docs/planner-hints.md lists every planner hint of sql/ (a SET clause of a planner
setting, a set_config of one, an OFFSET 0 fence), by file and function: the list to
re-check on each PostgreSQL major, held equal to the code."""

from __future__ import annotations

import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANNER_SET = re.compile(
    r"^SET\s+(jit|plan_cache_mode|work_mem|enable_\w+|random_page_cost|\w+_collapse_limit)\s*=\s*(.+?)\s*(?:--.*)?$"
)
PLANNER_CALL = re.compile(r"set_config\('(plan_cache_mode|jit|work_mem|enable_\w+)',\s*'([^']*)'")
ROW = re.compile(r"^\| `([^`]+\.sql)` \| `(\w+)` \| `(.+)` \|$", re.M)


def hints_in_sql() -> collections.Counter:
    found: collections.Counter = collections.Counter()
    for f in sorted((ROOT / "sql").glob("*.sql")):
        for chunk in re.split(r"^(?=CREATE OR REPLACE (?:FUNCTION|VIEW) )", f.read_text(), flags=re.M):
            m = re.match(r"CREATE OR REPLACE (?:FUNCTION|VIEW) scrinalia\.(\w+)", chunk)
            if not m:
                continue
            code = re.sub(r"--[^\n]*", "", chunk)
            for line in chunk.splitlines():
                if h := PLANNER_SET.match(line):
                    found[(f.name, m.group(1), f"SET {h.group(1)} = {h.group(2)}")] += 1
            for h in PLANNER_CALL.finditer(code):
                found[(f.name, m.group(1), f"set_config('{h.group(1)}', '{h.group(2)}')")] += 1
            found.update((f.name, m.group(1), "OFFSET 0") for _ in re.finditer(r"\bOFFSET 0\b", code))
    return found


def test_the_doc_lists_every_planner_hint_of_the_sql():
    listed = collections.Counter(ROW.findall((ROOT / "docs" / "planner-hints.md").read_text()))
    in_sql = hints_in_sql()
    assert in_sql, "no hint found: the scan is broken"
    assert listed == in_sql, {"not listed": in_sql - listed, "listed, not in the SQL": listed - in_sql}


def test_the_scan_finds_a_hint_added():
    """The check can fail: a hint in a scratch copy of a function is found."""
    text = "CREATE OR REPLACE FUNCTION scrinalia.f()\nRETURNS int\nSET enable_hashjoin = off\nAS $$ SELECT 1 OFFSET 0 $$;\n"
    m = PLANNER_SET.match(text.splitlines()[2])
    assert m is not None and m.group(1) == "enable_hashjoin"
    assert len(re.findall(r"\bOFFSET 0\b", text)) == 1
