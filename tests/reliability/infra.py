"""Real infrastructure for the reliability tests: a PgBouncer in front of a cluster,
and a primary with a streaming replica.

    bouncer = PgBouncer(cluster, pool_mode="transaction").start()
    bouncer.dsn("postgres")          # a DSN through the pooler
    bouncer.stop()

    primary = LocalCluster(bin_dir).start()
    replica = primary.start_replica()      # pg_basebackup -R, then start
    multi_host_dsn(primary, replica)       # target_session_attrs=read-write

Both run as the `postgres` OS user when we are root (neither runs as root), with
their configuration and logs in a temporary directory that stop() removes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from scrinalia_workers.testkit.cluster import LocalCluster, find_bin_dir, free_port
from scrinalia_workers.testkit.waiting import wait_for


def pgbouncer_binary() -> str | None:
    """SCRINALIA_PGBOUNCER, else pgbouncer on PATH or in /usr/sbin (Debian's package)."""
    given = os.environ.get("SCRINALIA_PGBOUNCER")
    for candidate in [given] if given else [shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _unavailable(reason: str):
    """Skip, unless SCRINALIA_REQUIRE_INFRA is set (CI installs everything: fail there)."""
    if os.environ.get("SCRINALIA_REQUIRE_INFRA"):
        pytest.fail(f"SCRINALIA_REQUIRE_INFRA is set but this test {reason}")
    pytest.skip(reason)


def require_pgbouncer() -> str:
    found = pgbouncer_binary()
    if not found:
        _unavailable("needs the pgbouncer binary (apt-get install pgbouncer; .ci/run installs it)")
    return found


def require_server_binaries() -> Path:
    bin_dir = find_bin_dir()
    if bin_dir is None or not (bin_dir / "pg_basebackup").exists():
        _unavailable("needs PostgreSQL server binaries with pg_basebackup (Debian's postgresql)")
    return bin_dir


def pgbouncer_version(binary: str | None = None) -> tuple[int, ...]:
    out = subprocess.run(
        [binary or require_pgbouncer(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    # "PgBouncer 1.18.0\nlibevent ..."
    return tuple(int(x) for x in out.split()[1].split("."))


def _wait_port(port: int, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=timeout, what=f"pgbouncer listening on {port}")


class PgBouncer:
    """A PgBouncer in front of one LocalCluster, auth_type trust with an auth_file.

    `ignore_startup_parameters` defaults to what libpq clients send that PgBouncer
    1.18 refuses otherwise (extra_float_digits is psycopg's, options ours).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        pool_mode: str = "transaction",
        *,
        users: tuple[str, ...] = ("postgres",),
        pool_size: int = 20,
        ignore_startup_parameters: str = "extra_float_digits,options",
        extra: dict[str, str] | None = None,
    ):
        self.binary = require_pgbouncer()
        self.cluster = cluster
        self.pool_mode = pool_mode
        self.users = users
        self.pool_size = pool_size
        self.ignore = ignore_startup_parameters
        self.extra = extra or {}
        self.base = Path(tempfile.mkdtemp(prefix="scrinalia-pgbouncer-"))
        self.port = free_port()
        self.ini = self.base / "pgbouncer.ini"
        self.logfile = self.base / "pgbouncer.log"
        self.proc: subprocess.Popen | None = None
        self.os_user = "postgres" if os.geteuid() == 0 else None

    def _write_config(self) -> None:
        (self.base / "users.txt").write_text("".join(f'"{u}" ""\n' for u in self.users))
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.base / "users.txt"),
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "max_client_conn": "200",
            "logfile": str(self.logfile),
            "admin_users": "postgres",
            "ignore_startup_parameters": self.ignore,
            "server_login_retry": "1",
            **self.extra,
        }
        self.ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.cluster.port}\n"
            "[pgbouncer]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
        )

    def start(self) -> PgBouncer:
        self._write_config()
        self.logfile.touch()
        kwargs = {}
        if self.os_user:
            pw = pwd.getpwnam(self.os_user)
            for p in (self.base, self.ini, self.logfile, self.base / "users.txt"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        # foreground (no -d): the pid we hold is PgBouncer's own
        self.proc = subprocess.Popen(
            [self.binary, str(self.ini)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs
        )
        _wait_port(self.port, 10, self.proc, self.logfile)
        return self

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    def log(self) -> str:
        return self.logfile.read_text() if self.logfile.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def multi_host_dsn(*clusters: LocalCluster, dbname: str = "postgres", user: str = "postgres") -> str:
    """One libpq string naming every node; libpq picks the one that accepts writes."""
    hosts = ",".join("127.0.0.1" for _ in clusters)
    ports = ",".join(str(c.port) for c in clusters)
    return f"host={hosts} port={ports} user={user} dbname={dbname} target_session_attrs=read-write"
