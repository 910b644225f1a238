"""At start-up the runner finds a handlers module in the current directory, as `python -m`
would, says how to make one importable when it cannot, and warns about handlers for
workers nobody registered."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import make_worker

pytestmark = pytest.mark.slow  # the real runner process


def _runner(cwd, dsn: str, module: str, *args: str) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    # the console script, as an operator starts it: its sys.path lacks the current directory
    script = [sys.executable, "-c", "import sys; from scrinalia_workers.runner import main; sys.exit(main())"]
    return subprocess.Popen(
        [*script, "--dsn", dsn, "--handlers", module, "--json", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_handlers_module_in_the_current_directory_is_found_and_a_typo_is_warned(tmp_path, db, db_dsn):
    make_worker(db, "ocr")
    (tmp_path / "myhandlers.py").write_text("HANDLERS = {'ocr': lambda run: None, 'orc': lambda run: None}\n")
    p = _runner(tmp_path, db_dsn, "myhandlers")
    events = []
    try:
        assert p.stderr is not None
        for line in p.stderr:
            ev = json.loads(line)
            events.append(ev)
            if ev["event"] == "runner started":
                break
    finally:
        p.terminate()
        p.wait(30)
    names = [e["event"] for e in events]
    assert "runner started" in names, events
    warned = [e for e in events if e["event"] == "handlers for unregistered workers"]
    assert len(warned) == 1 and warned[0]["workers"] == "orc", events


def test_a_module_nowhere_says_how_to_make_it_importable(tmp_path, db_dsn):
    p = _runner(tmp_path, db_dsn, "nothere")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2
    assert "Traceback" not in err
    assert "no module named 'nothere'" in err and str(tmp_path) in err and "PYTHONPATH" in err, err
