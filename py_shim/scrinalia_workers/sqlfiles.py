"""Where the SQL lives: the migrations and the code re-applied after them."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The directory holding sql/ and migrations/.

    SCRINALIA_ROOT wins; otherwise the checkout this package was installed from
    (the package is installed editable from the repository, see the README).
    """
    env = os.environ.get("SCRINALIA_ROOT")
    root = Path(env) if env else Path(__file__).resolve().parents[2]
    if not (root / "migrations").is_dir() or not (root / "sql").is_dir():
        from scrinalia_workers.errors import ConfigError

        raise ConfigError(
            f"cannot find migrations/ and sql/ under {root}: set SCRINALIA_ROOT to the scrinalia-workers checkout"
        )
    return root


def migrations_dir() -> Path:
    return project_root() / "migrations"


def sql_files() -> list[Path]:
    return sorted((project_root() / "sql").glob("*.sql"))


def head() -> str:
    """The id of this release's last migration: the schema head its code needs.

    Written nowhere else in the shim; scrinalia.schema_head() (sql/70_status.sql) says
    the same in SQL, and tests/admin/test_migrations.py checks that the two agree."""
    return sorted(
        p.name.removesuffix(".sql") for p in migrations_dir().glob("*.sql") if not p.name.endswith(".rollback.sql")
    )[-1]
