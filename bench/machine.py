"""What the figures were measured on: the machine, the server and its settings."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from .common import conn

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
