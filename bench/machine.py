"""What the figures were measured on: the machine, the server and its settings."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

import psycopg

from .common import conn

# A figure taken above this 1-minute load average (on the benchmark's 2 shared cores)
# is marked as measured on a loaded machine.
LOADED = 1.5
# How long a benchmark that waits for a quiet machine waits at most before each drain.
QUIET_WAIT = 150.0


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def await_quiet(
    most: float = QUIET_WAIT,
    poll: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """The 1-minute load average once it is at most LOADED, or after `most` seconds
    (the load then, above LOADED: the caller marks its figure). The machine's load
    includes the benchmark's own previous drain, which settles within a minute or so."""
    deadline = clock() + most
    now = load()
    while now > LOADED and clock() < deadline:
        sleep(poll)
        now = load()
    return now


def wal_mark(c: psycopg.Connection) -> tuple[float, int]:
    """The cluster's WAL written so far (bytes) and its checkpoints so far, read on an
    open connection, to take the difference across a drain (pg_stat_checkpointer from
    PostgreSQL 17 on)."""
    lsn = float(c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").fetchone()[0])
    if c.info.server_version >= 170000:
        done = c.execute("SELECT num_timed + num_requested FROM pg_stat_checkpointer").fetchone()[0]
    else:
        done = c.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").fetchone()[0]
    return lsn, int(done)


SETTINGS = (
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "max_connections",
    "wal_level",
    "jit",
    "work_mem",
    "shared_preload_libraries",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _version(pkg: str) -> str:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return "not installed"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def describe(dsn: str, cluster_note: str) -> dict:
    with conn(dsn) as c:
        server = c.execute("SELECT version()").fetchone()[0]
        settings = {s: c.execute(f"SHOW {s}").fetchone()[0] for s in SETTINGS}
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": utc_now(),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory": _mem_total(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in ("psycopg", "croniter", "procrastinate", "pgqueuer", "matplotlib")},
        "server": server,
        "cluster": cluster_note,
        "settings": settings,
        "load": load,
    }


def rows(m: dict) -> list[list[str]]:
    out = [
        ["date", m["date"]],
        ["CPU", f"{m['cores']} cores (os.cpu_count()), {m['cpu']}"],
        ["memory", m["memory"]],
        ["OS", m["os"]],
        ["Python", m["python"] + "; " + ", ".join(f"{k} {v}" for k, v in m["packages"].items())],
        ["PostgreSQL", m["server"]],
        ["cluster", m["cluster"]],
    ]
    out += [[f"`{k}`", v] for k, v in m["settings"].items()]
    if m["load"]:
        out.append(["load average at start", " / ".join(f"{x:.2f}" for x in m["load"]) + " (1 / 5 / 15 min)"])
    return out
