"""Issue 14: the alerts in words, the metrics through the real prometheus-postgres-exporter,
and the Prometheus rules checked and unit-tested by the real promtool."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import psycopg
import pytest
import yaml

from helpers import claim, finish, make_worker, put_schedule, set_next_run, tick
from scrinalia_workers.testkit.cluster import free_port
from scrinalia_workers.testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"


@pytest.fixture
def world(db):
    """ocr: a period that failed all three attempts, then a skip and a manual run waiting
    400 s for a runner; late: overdue; mars: set aside; gone: a reaped lease."""
    for w in ("ocr", "late", "mars", "gone"):
        make_worker(db, w)
    put_schedule(db, "ocr", "0 2 * * *", "UTC")
    tick(db)
    set_next_run(db, "ocr", "1 minute")
    tick(db, only=["ocr"])
    attempts = []
    for n in range(1, 4):
        run_id, token, *_ = claim(db)
        attempts.append(run_id)
        finish(db, run_id, token, "FAILED", f"disk full (attempt {n})\ntraceback...")
        if n < 3:
            db.execute("SELECT * FROM scrinalia.create_retries()")
            db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE retry_of = %s", (run_id,))
    manual = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = now() - interval '400 seconds' WHERE run_id = %s",
        (manual,),
    )
    set_next_run(db, "ocr", "1 second")
    assert [d[1] for d in tick(db, only=["ocr"])[1]] == ["SKIPPED"]
    put_schedule(db, "late", "*/5 * * * *", "UTC")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '10 minutes'"
        " WHERE worker_name = 'late'"
    )
    put_schedule(db, "mars", "* * * * *", "UTC")
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 hour',"
        " arm_error = 'cannot compute the next occurrence here: unknown zone', arm_error_since = now(),"
        " arm_retry_at = now() + interval '1 minute' WHERE worker_name = 'mars'"
    )
    gone = db.execute("SELECT run_id FROM scrinalia.enqueue('gone')").fetchone()[0]
    db.execute("SELECT * FROM scrinalia.claim_next('runner-7', '1 second', ARRAY['gone'])")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (gone,),
    )
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 1
    return {"attempts": attempts, "manual": manual, "gone": gone}


def test_current_alerts_say_what_to_act_on_to_a_reader(world, connect_as):
    rows = (
        connect_as("reader")
        .execute(
            "SELECT kind, worker_name, run_ids, message FROM scrinalia.current_alerts() ORDER BY kind, worker_name"
        )
        .fetchall()
    )
    by_kind = {(k, w): (ids, msg) for k, w, ids, msg in rows}
    ids, msg = by_kind[("FAILED_AFTER_ALL_ATTEMPTS", "ocr")]
    assert ids == world["attempts"] and "ended FAILED after 3 attempt(s)" in msg and "disk full (attempt 3)" in msg
    assert "traceback" not in msg  # the first line of the error only
    assert "is a scheduler running?" in by_kind[("SCHEDULE_OVERDUE", "late")][1]
    assert "unknown zone" in by_kind[("SCHEDULE_SET_ASIDE", "mars")][1]
    ids, msg = by_kind[("LEASE_REAPED", "gone")]
    assert ids == [world["gone"]] and "runner-7" in msg
    assert "no scheduler holds the lock" in by_kind[("SCHEDULER_UNHEALTHY", None)][1]
    # the manual run waiting 400 s: claimable longer than unclaimed_alert_after()
    ids, msg = by_kind[("RUN_UNCLAIMED", "ocr")]
    assert ids == [world["manual"]] and "no runner has claimed it" in msg
    assert len(rows) == 6


def test_a_later_successful_period_clears_the_failure_alert(world, db):
    db.execute("SELECT scrinalia.cancel_run(%s)", (world["manual"],))
    set_next_run(db, "ocr", "1 second")
    tick(db, only=["ocr"])
    run_id, token, *_ = claim(db, workers=["ocr"])
    finish(db, run_id, token, "SUCCEEDED")
    kinds = [r[0] for r in db.execute("SELECT kind FROM scrinalia.current_alerts() WHERE worker_name = 'ocr'")]
    assert "FAILED_AFTER_ALL_ATTEMPTS" not in kinds


def _scrape(url: str, timeout: float = 20) -> str:
    last: list[object] = [None]

    def metrics() -> str | None:
        try:
            body = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError as e:
            last[0] = e
            return None
        last[0] = body[-500:]
        return body if "scrinalia_scheduler_healthy" in body else None

    try:
        return wait_for(metrics, timeout=timeout, interval=0.2, what=f"scrinalia metrics at {url}")
    except AssertionError:
        raise AssertionError(f"no scrinalia metrics at {url}: {last[0]}") from None


def _samples(body: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for line in body.splitlines():
        m = re.match(r"^(scrinalia_\w+)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels - {("server", v) for k, v in labels if k == "server"})] = float(m.group(3))
    return out


def _get(samples, name: str, **labels) -> float:
    for (n, ls), v in samples.items():
        if n == name and set(labels.items()) <= set(ls):
            return v
    raise AssertionError(f"no sample {name}{labels}")


def test_the_real_exporter_exposes_the_metrics(world, db, db_dsn, role_logins, procs):
    exporter = shutil.which("prometheus-postgres-exporter")
    if exporter is None:
        _missing("prometheus-postgres-exporter is not installed (Debian package; .ci/run installs it)")
    # a runner whose two handler threads are stuck (as the runner says it: tests/runner)
    db.execute("SELECT scrinalia.report_runner_stuck('runner-7', %s, 2, '30 seconds')", ([world["gone"]],))
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)
    # the documented grant: a login in scrinalia_monitor only
    dsn = f"postgresql://{role_logins['monitor']}@{info['host']}:{info['port']}/{info['dbname']}?sslmode=disable"
    port = free_port()
    p = procs.start(
        [
            exporter,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--extend.query-path={MONITORING / 'queries.yaml'}",
            "--disable-default-metrics",
            "--disable-settings-metrics",
            "--log.level=warn",
        ],
        {"DATA_SOURCE_NAME": dsn, "PATH": "/usr/bin:/bin"},
        inherit_env=False,
        lines="both",
    )
    body = _scrape(f"http://127.0.0.1:{port}/metrics")
    p.stop(timeout=10)
    out = "".join(p.raw)
    assert "error" not in out.lower(), out
    s = _samples(body)
    assert _get(s, "scrinalia_scheduler_healthy") == 0
    assert _get(s, "scrinalia_scheduler_lock_held") == 0
    assert _get(s, "scrinalia_scheduler_overdue_schedules") == 1
    assert _get(s, "scrinalia_scheduler_set_aside_schedules") == 1
    assert _get(s, "scrinalia_scheduler_leases_reaped_last_hour") == 1
    assert _get(s, "scrinalia_worker_failed_after_all_attempts", worker_name="ocr") == 1
    assert _get(s, "scrinalia_worker_failed_after_all_attempts", worker_name="late") == 0
    assert _get(s, "scrinalia_worker_retries_created", worker_name="ocr") == 2
    assert _get(s, "scrinalia_worker_periods_skipped", worker_name="ocr") == 1
    assert 55 <= _get(s, "scrinalia_worker_last_lateness_seconds", worker_name="ocr") <= 120
    assert 399 <= _get(s, "scrinalia_worker_oldest_claimable_wait_seconds", worker_name="ocr") <= 460
    assert _get(s, "scrinalia_worker_overdue", worker_name="late") == 1
    assert _get(s, "scrinalia_worker_set_aside", worker_name="mars") == 1
    # the workers' alerts: ocr's manual run nobody claims names the run by value
    assert _get(s, "scrinalia_worker_unclaimed", worker_name="ocr") == 1
    assert _get(s, "scrinalia_worker_slot_run_id", worker_name="ocr") == world["manual"]
    assert _get(s, "scrinalia_worker_skipped_in_a_row", worker_name="ocr") == 1
    assert _get(s, "scrinalia_worker_overrunning", worker_name="ocr") == 0
    assert _get(s, "scrinalia_worker_starved", worker_name="ocr") == 0
    assert _get(s, "scrinalia_worker_max_run_time_seconds", worker_name="late") == 3600
    assert _get(s, "scrinalia_ledger_runs", worker_name="ocr", status="FAILED", trigger="SCHEDULE") == 3
    assert _get(s, "scrinalia_ledger_runs", worker_name="gone", status="INTERRUPTED", trigger="MANUAL") == 1
    assert _get(s, "scrinalia_runner_stalls_stuck_runners") == 1
    assert _get(s, "scrinalia_runner_stalls_stuck_threads") == 2
    assert _get(s, "scrinalia_runner_stalls_exited_stuck_runners") == 0
    # low cardinality: no run ids among the labels
    assert not any(k in ("run_id", "run_ids") for (_, ls) in s for k, _ in ls)


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        _missing("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return tool


def _missing(why: str) -> None:
    """Skip where a developer lacks the tool; fail in CI (SCRINALIA_REQUIRE_INFRA), which installs it."""
    if os.environ.get("SCRINALIA_REQUIRE_INFRA"):
        pytest.fail(why)
    pytest.skip(why)


def test_the_alert_rules_pass_promtool_check_and_unit_tests():
    tool = _promtool()
    check = subprocess.run(
        [tool, "check", "rules", str(MONITORING / "alerts.rules.yml")], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 9 rules found" in check.stdout
    unit = subprocess.run(
        [tool, "test", "rules", str(MONITORING / "alerts.test.yml")], capture_output=True, text=True, timeout=60
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_the_rules_use_only_exported_metrics():
    exported = set()
    text = (MONITORING / "queries.yaml").read_text()
    for ns, body in re.findall(r"^(scrinalia_\w+):\n(.*?)(?=^\S|\Z)", text, re.M | re.S):
        for col, usage in re.findall(r"- (\w+):\n\s+usage: \"(\w+)\"", body):
            if usage != "LABEL":
                exported.add(f"{ns}_{col}")
    used = set(re.findall(r"\b(scrinalia_[a-z_]+)\b", (MONITORING / "alerts.rules.yml").read_text()))
    assert used and used <= exported, used - exported


def test_the_monitoring_group_reads_what_the_queries_need_and_nothing_more(db, connect_as):
    """scrinalia_monitor calls every function monitoring/queries.yaml calls, and reads no
    run's request, config, error or lease owner, no view but the counts, no schedule."""
    import re

    monitor = connect_as("monitor")
    queries = yaml.safe_load((MONITORING / "queries.yaml").read_text())
    called = {m for q in queries.values() for m in re.findall(r"scrinalia\.(\w+)\(", q["query"])}
    assert called, "no function found in queries.yaml"
    for q in queries.values():
        monitor.execute(q["query"]).fetchall()
    for forbidden in (
        "SELECT * FROM scrinalia.worker_run_history",
        "SELECT * FROM scrinalia.archive_worker_runs",
        "SELECT * FROM scrinalia.worker_agenda",
        "SELECT * FROM scrinalia.worker_catalogue",
        "SELECT * FROM scrinalia.get_schedule('x')",
        "SELECT * FROM scrinalia.current_alerts()",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            monitor.execute(forbidden)
