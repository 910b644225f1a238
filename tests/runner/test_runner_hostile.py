"""Issue 10: the real runner process survives whatever a handler does.

Each worker's handler misbehaves in its own way (NUL bytes, lone surrogates, a
10 MB message, BaseExceptions, a failing __str__, odd return values). Every run must
end FAILED with a storable, capped error text and a fingerprint, and the same
runner process must go on to claim and finish the next run.
"""

from __future__ import annotations

import textwrap

import pytest

from helpers import make_worker, run_row
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

HOSTILE = textwrap.dedent("""
    import os

    class Custom(BaseException):
        pass

    class BadStr(Exception):
        def __str__(self):
            raise ValueError("no text for you")

    class WorseStr(Exception):
        def __str__(self):
            raise SystemExit("__str__ exits")
        def __repr__(self):
            raise KeyboardInterrupt()

    def _coro():
        async def f():
            return None
        return f()

    def _gen():
        yield 1

    import threading

    class Haunted:
        def __del__(self):
            raise RuntimeError("raised in __del__")

    def _stray(run):
        threading.Thread(target=lambda: 1 / 0, name="stray").start()
        Haunted()
        return None

    HANDLERS = {
        "stray": _stray,
        "nul": lambda run: (_ for _ in ()).throw(RuntimeError("bad\\x00byte in \\x00 text")),
        "surrogate": lambda run: (_ for _ in ()).throw(FileNotFoundError(2, "missing", os.fsdecode(b"\\xff.pdf"))),
        "huge": lambda run: (_ for _ in ()).throw(RuntimeError("x" * 10_000_000)),
        "sysexit": lambda run: (_ for _ in ()).throw(SystemExit(3)),
        "kbint": lambda run: (_ for _ in ()).throw(KeyboardInterrupt()),
        "genexit": lambda run: (_ for _ in ()).throw(GeneratorExit()),
        "custom": lambda run: (_ for _ in ()).throw(Custom("custom base exception")),
        "badstr": lambda run: (_ for _ in ()).throw(BadStr()),
        "worsestr": lambda run: (_ for _ in ()).throw(WorseStr()),
        "ret_int": lambda run: 42,
        "ret_false": lambda run: False,
        "ret_coro": lambda run: _coro(),
        "ret_gen": lambda run: _gen(),
        "ret_none": lambda run: None,
        "ret_dict": lambda run: {"pages": 3},
        "ret_str": lambda run: "done",
    }
""")

FAILING = [
    "nul",
    "surrogate",
    "huge",
    "sysexit",
    "kbint",
    "genexit",
    "custom",
    "badstr",
    "worsestr",
    "ret_int",
    "ret_false",
    "ret_coro",
    "ret_gen",
]
SUCCEEDING = ["ret_none", "ret_dict", "ret_str", "stray"]
MAX_ERROR = 4000  # failure.MAX_ERROR_CHARS, restated as the fact under test


@pytest.fixture
def hostile_module(tmp_path, monkeypatch):
    (tmp_path / "hostile_handlers.py").write_text(HOSTILE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "hostile_handlers"


def test_hostile_handlers_end_failed_and_the_runner_goes_on(db, db_dsn, hostile_module, procs):
    for w in FAILING + SUCCEEDING:
        make_worker(db, w)
    runs = {w: db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (w,)).fetchone()[0] for w in FAILING + SUCCEEDING}
    p = procs.runner(db_dsn, hostile_module, "--runner-id", "hostile")
    wait_for(
        lambda: db.execute(
            "SELECT count(*) = 0 FROM scrinalia.archive_worker_runs WHERE status IN ('QUEUED', 'RUNNING')"
        ).fetchone()[0],
        timeout=30,
        what="every run finished",
    )
    for w in FAILING:
        row = run_row(db, runs[w])
        assert row["status"] == "FAILED", (w, row["status"], row["error"])
        assert row["error"] and len(row["error"]) <= MAX_ERROR, w
        assert "\x00" not in row["error"], w
        assert row["error_fingerprint"] and len(row["error_fingerprint"]) == 16, w
    for w in SUCCEEDING:
        assert run_row(db, runs[w])["status"] == "SUCCEEDED", w
    err = {w: run_row(db, runs[w])["error"] for w in FAILING}
    assert err["nul"].startswith("RuntimeError: bad\\x00byte in \\x00 text")
    assert "\\udcff.pdf" in err["surrogate"] and err["surrogate"].startswith("FileNotFoundError")
    assert err["huge"].startswith("RuntimeError: xxxx") and "characters cut" in err["huge"]
    assert err["sysexit"].startswith("SystemExit: 3")
    assert err["kbint"].startswith("KeyboardInterrupt")
    assert err["genexit"].startswith("GeneratorExit")
    assert err["custom"].startswith("Custom: custom base exception")
    assert err["badstr"].startswith("BadStr: <exception str() failed>")
    assert err["worsestr"].startswith("WorseStr: <exception str() failed>")
    assert err["ret_int"] == "handler returned int (expected None, a str or a dict)"
    assert err["ret_false"] == "handler returned bool (expected None, a str or a dict)"
    assert err["ret_coro"].startswith("handler returned coroutine")
    assert err["ret_gen"].startswith("handler returned generator")
    # the same runner, still alive, claims the next run
    assert p.popen.poll() is None
    after = db.execute("SELECT run_id FROM scrinalia.enqueue('ret_none')").fetchone()[0]
    wait_for(lambda: run_row(db, after)["status"] == "SUCCEEDED", timeout=10, what="the next run done")
    assert run_row(db, after)["lease_owner"] == "hostile"
    assert p.stop() == 0
    assert not any("Traceback" in line for line in p.raw), "".join(p.raw[-20:])
    assert p.count("thread error", thread="stray") == 1 and p.count("unraisable error") == 1
    # every finished run was logged on one line each, none dropped
    assert p.count("finished") == len(FAILING) + len(SUCCEEDING) + 1


@pytest.fixture
def latin1_dsn(admin, admin_dsn):
    import os

    import psycopg

    from scrinalia_workers.admin.migrate import migrate

    name = f"sw_latin1_{os.getpid()}"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    migrate(dsn, create_groups=True)
    yield dsn
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_text_the_database_encoding_cannot_hold_is_stored_escaped(latin1_dsn, tmp_path, monkeypatch, procs):
    import psycopg

    (tmp_path / "cjk_handlers.py").write_text(
        "def fail(run):\n    raise FileNotFoundError('\u6587\u6863.pdf missing, caf\u00e9 closed')\n"
        "HANDLERS = {'cjk': fail, 'ok': lambda run: None}\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with psycopg.connect(latin1_dsn, autocommit=True) as db:
        for w in ("cjk", "ok"):
            make_worker(db, w)
        failed = db.execute("SELECT run_id FROM scrinalia.enqueue('cjk')").fetchone()[0]
        p = procs.runner(latin1_dsn, "cjk_handlers")
        p.wait_event("finished", run_id=failed, status="FAILED")
        after = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
        p.wait_event("finished", run_id=after, status="SUCCEEDED")
        assert p.stop() == 0
        error = run_row(db, failed)["error"]
    assert error.startswith("FileNotFoundError: \\u6587\\u6863.pdf missing, caf\\xe9 closed")
