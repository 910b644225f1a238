"""The pages in a real headless Chromium (Debian's `chromium`: --dump-dom and
--screenshot), read as a person would: a row per worker, an alert and what to do about
it, a failed period's chain of attempts; and planted markup that stays text in the DOM
the browser built. A screenshot of each page is kept under tests/web/artifacts/
(git-ignored) and its path printed.

Skipped where chromium is not installed, but failed under SCRINALIA_REQUIRE_INFRA
(CI installs it: .ci/run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from webview import HOSTILE, login_dsn

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "needs Debian's chromium (apt-get install chromium) for the headless browser"
    if os.environ.get("SCRINALIA_REQUIRE_INFRA"):
        pytest.fail(f"SCRINALIA_REQUIRE_INFRA is set but this test {reason}")
    pytest.skip(reason)


def browse(url: str, tmp_path: Path, shot: str | None = None) -> str:
    """The DOM Chromium built from `url` (its scripts run, had there been any), and a
    screenshot of it under ARTIFACTS when `shot` names one."""
    base = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-2000:]
    if shot:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{shot}.png"
        path.unlink(missing_ok=True)
        r = subprocess.run(
            [*base, f"--screenshot={path}", "--window-size=1500,1100", url], capture_output=True, text=True, timeout=90
        )
        assert r.returncode == 0 and path.is_file() and path.stat().st_size > 10_000, r.stderr[-2000:]
        print(f"screenshot: {path}")
    return dom.stdout


def _cells(dom: str, section: str) -> list[list[str]]:
    """The text of each body row's cells in the section headed `section`."""
    part = dom.split(f"<h2>{section}</h2>", 1)[1].split("</section>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", part.split("<tbody>", 1)[1], re.S)
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows]


def test_a_person_finds_the_workers_the_alert_and_the_failed_chain(ledger, db_dsn, role_logins, start_web, tmp_path):
    chromium()
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))

    overview = browse(w.url, tmp_path, "overview")
    agenda = _cells(overview, "Agenda")
    assert [r[0] for r in agenda] == ["idle", "ocr", "thumbs"]  # a row per worker
    ocr = agenda[1]
    assert ocr[1:3] == ["0 2 * * *", "Europe/Lisbon"] and ocr[4].endswith("Z")
    alerts = {r[0]: r for r in _cells(overview, "Alerts")}
    failed = alerts["FAILED_AFTER_ALL_ATTEMPTS"]
    assert failed[1] == "ocr" and "ended FAILED after 3 attempt(s)" in failed[3]
    assert "fix the cause" in failed[4]  # what to do, beside it
    assert [r[0] for r in _cells(overview, "Active runs")] == [f"#{ledger['queued']}"]

    worker = browse(w.url + "worker?name=ocr", tmp_path, "worker-ocr")
    assert "period 2026-01-01 02:00:00Z: " in worker and "FAILED after 3 attempt(s)" in worker
    chain = _cells(worker, "Scheduled periods")
    assert [(r[0], r[2]) for r in chain] == [("1/3", "FAILED"), ("2/3", "FAILED"), ("3/3", "FAILED")]
    assert chain[2][6] == "gave up: disk full" and chain[1][4] == "1m10s"

    runs = browse(w.url + "runs", tmp_path, "runs")
    assert f"#{ledger['chain_last']}" in [r[0] for r in _cells(runs, "Runs")]


def test_planted_markup_stays_text_in_the_browsers_dom(planted, db_dsn, role_logins, start_web, tmp_path):
    chromium()
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    for path, shot in (("", "hostile-overview"), ("worker?name=ocr", "hostile-worker"), ("runs", None)):
        dom = browse(w.url + path, tmp_path, shot)
        # had any of it been markup, the DOM would hold the elements and attributes it made
        # (in the DOM's text every "<" is "&lt;": each "<" left opens an element of the page's)
        assert "<script" not in dom and "<img" not in dom
        assert not re.search(r"<[^>]*\sonmouseover=", dom) and not re.search(r"<[^>]*\sonerror=", dom)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert HOSTILE.startswith("x<script>")
