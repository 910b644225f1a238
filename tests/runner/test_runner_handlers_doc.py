"""docs/handlers.md's example handlers module, taken from the page and run as written
through a real scrinalia-runner with a scrinalia_runner login."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from helpers import run_row

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "handlers.md"


def example_module() -> str:
    example = DOC.read_text().split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", example, re.S | re.M)
    assert len(blocks) == 1, "the Example section has one python block"
    return blocks[0]


def test_the_documented_example_runs_as_written(db, db_dsn, role_logins, tmp_path, monkeypatch, procs):
    (tmp_path / "doc_handlers.py").write_text(example_module())
    inbox = tmp_path / "inbox"
    runner_dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["runner"])
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("ARCHIVE_INBOX", str(inbox))
    monkeypatch.setenv("DATABASE_URL", runner_dsn)
    db.execute("SELECT scrinalia.register_worker('thumbnails')")
    enqueue = "SELECT run_id FROM scrinalia.enqueue('thumbnails')"

    p = procs.runner(runner_dsn, "doc_handlers", "--runner-id", "doc-example")
    p.wait_event("runner started")
    # no inbox yet: the handler raises, the run is FAILED with its reason
    failed = db.execute(enqueue).fetchone()[0]
    p.wait_event("finished", run_id=failed, status="FAILED")
    assert run_row(db, failed)["error"].startswith("FileNotFoundError: no inbox ")

    (inbox / "thumbnails").mkdir(parents=True)
    for name in ("a.pdf", "b.pdf"):
        (inbox / "thumbnails" / name).write_bytes(b"%PDF-1.7 " + name.encode() * 20)
    db.execute("SELECT scrinalia.add_units('thumbnails', ARRAY['a.pdf', 'b.pdf'])")
    first = db.execute(enqueue).fetchone()[0]
    ev = p.wait_event("finished", run_id=first, status="SUCCEEDED")
    assert ev["summary"] == "{'files': 2, 'made': 2}"
    assert sorted(f.name for f in (inbox / "thumbnails").glob("*.thumb128")) == ["a.thumb128", "b.thumb128"]
    assert db.execute(
        "SELECT pending, processed FROM scrinalia.worker_queue_counters WHERE worker_name = 'thumbnails'"
    ).fetchone() == (0, 2)

    # run again (a retry would): nothing is made twice
    again = db.execute(enqueue).fetchone()[0]
    ev = p.wait_event("finished", run_id=again, status="SUCCEEDED")
    assert ev["summary"] == "{'files': 2, 'made': 0}"
    assert p.stop() == 0
    assert run_row(db, first)["lease_owner"] == "doc-example"
    assert any("a.pdf done" in line for line in p.raw)  # the handler's own log lines


def test_the_log_table_names_every_event_the_runner_logs():
    package = Path(__file__).resolve().parents[2] / "py_shim" / "scrinalia_workers" / "runner"
    source = "\n".join(p.read_text() for p in sorted(package.glob("*.py")))
    logged = set(re.findall(r'\blog\(\s*"([^"]+)"', source))
    for a, b in re.findall(r'\blog\(\s*"([a-z ]+)" if [^,]+ else "([a-z ]+)"', source):
        logged |= {a, b}
    logged |= set(re.findall(r'\bLineSpec\(\s*"([^"]+)"', source))  # run_lines' lines
    logged |= set(re.findall(r'\blast_words\(\s*"([^"]+)"', source))  # a line on the way out
    logged |= set(re.findall(r'\bexit_at_once\(\s*[^,]+,\s*[^,]+,\s*"([^"]+)"', source))  # a second signal
    logged.add("config error")  # logs.startup_error's event under --json
    table = DOC.read_text().split("## What the runner logs", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z ]+)` \|", table, re.M))
    assert documented == logged
    assert len(logged) >= 14
