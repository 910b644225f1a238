"""A daemon's start-up before its database is reachable: StartupWait's pace and reports
on a FakeClock, and which refusals of a real server end the start-up at once."""

from __future__ import annotations

import random
import socket
import time

import psycopg
import pytest

from scrinalia_workers.errors import ConfigError
from scrinalia_workers.gateway.backoff import STARTUP_WAIT_REPORT_EVERY, Backoff, StartupWait
from scrinalia_workers.gateway.checks import preflight
from scrinalia_workers.testkit.clock import FakeClock


def _wait(limit=None):
    clock = FakeClock()
    said: list[tuple[str, int, float]] = []
    return StartupWait(lambda *a: said.append(a), limit, clock), clock, said


def test_the_wait_is_said_at_once_then_at_a_bounded_rate_and_backs_off():
    wait, clock, said = _wait()
    start = clock.monotonic()
    while clock.monotonic() - start < 600:
        assert wait.again("cannot connect to the database: Connection refused")
    assert said[0] == ("cannot connect to the database: Connection refused", 1, 0.0)
    assert len(said) <= 600 / STARTUP_WAIT_REPORT_EVERY + 1
    assert all(b[2] - a[2] >= STARTUP_WAIT_REPORT_EVERY for a, b in zip(said, said[1:], strict=False))
    assert max(clock.slept) <= 5.0 * 1.25 and clock.slept[0] < clock.slept[5]
    assert wait.attempts < 200  # backed off, not a busy loop


def test_a_limited_wait_ends_at_its_limit():
    wait, clock, said = _wait(limit=10)
    start = clock.monotonic()
    while wait.again("down"):
        pass
    assert clock.monotonic() - start == pytest.approx(10)


def test_an_unreachable_server_is_waited_for_then_given_up_at_the_limit(tmp_path):
    wait, clock, said = _wait(limit=3)
    with pytest.raises(ConfigError, match="cannot connect to the database"):
        preflight(f"host={tmp_path} port=1 dbname=x", "test", wait=wait)
    assert wait.attempts > 1 and said and "No such file or directory" in said[0][0]


def test_refusals_no_wait_can_mend_end_the_start_up_at_once(admin, admin_dsn):
    admin.execute("DROP ROLE IF EXISTS sw_wait_nologin")
    admin.execute("CREATE ROLE sw_wait_nologin NOLOGIN")
    refusals = {
        "no such database": psycopg.conninfo.make_conninfo(admin_dsn, dbname="sw_no_such_database"),
        "no such role": psycopg.conninfo.make_conninfo(admin_dsn, user="sw_no_such_role"),
        "a role that may not log in": psycopg.conninfo.make_conninfo(admin_dsn, user="sw_wait_nologin"),
        "a malformed port": psycopg.conninfo.make_conninfo(admin_dsn, port="abc"),
        "a malformed DSN": "dbname='unterminated",
    }
    try:
        for what, dsn in refusals.items():
            wait, clock, said = _wait()
            with pytest.raises(ConfigError):
                preflight(dsn, "test", wait=wait)
            assert (wait.attempts, said) == (0, []), what
    finally:
        admin.execute("DROP ROLE IF EXISTS sw_wait_nologin")


@pytest.fixture
def silent_server():
    """A TCP listener on 127.0.0.1 that accepts connections (the kernel completes them)
    and never answers a byte: a server hung at start-up, or a black-holed proxy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"host=127.0.0.1 port={s.getsockname()[1]} dbname=x user=x connect_timeout=10"


@pytest.mark.parametrize("limit", [2, 3.5])
def test_a_server_that_never_answers_is_given_up_within_the_limit(silent_server, limit):
    said: list[tuple[str, int, float]] = []
    started = time.monotonic()
    with pytest.raises(ConfigError, match="timeout"):
        preflight(silent_server, "test", wait=StartupWait(lambda *a: said.append(a), limit))
    took = time.monotonic() - started
    assert limit - 0.1 <= took <= limit + 1, took


@pytest.mark.parametrize("limit", [1, 2, 2.5, 3.2, 5, 7.3, 11, 60.9])
@pytest.mark.parametrize("answer", ["never", "refused"])
def test_every_attempt_is_cut_to_the_time_left(limit, answer):
    wait, clock, said = _wait(limit)
    start = clock.monotonic()
    while True:
        timeout = wait.attempt_timeout()
        if answer == "never":  # the attempt takes its whole timeout
            clock.advance(timeout)
        if not wait.again("down"):
            break
    assert limit - 1e-9 <= clock.monotonic() - start <= limit + 1
    assert wait.attempts < 100  # backed off, never a busy loop


def test_a_wait_near_its_end_never_spins():
    """Attempts that take no time, a limit that leaves a hair more than an attempt needs:
    the wait still ends (it once paused for ever shorter times, a busy loop)."""
    for seed in range(200):
        wait, clock, said = _wait(limit=11)
        wait.backoff = Backoff(base=0.5, cap=5.0, rng=random.Random(seed))
        while wait.again("refused"):
            assert wait.attempts < 100, seed
