"""Where the SQL lives: the migrations and the code re-applied after them.

In the repository they are sql/ and migrations/ at its top; a built wheel carries them
as package data (scrinalia_workers/sqldata/, copied in by setup.py's build step), read
through importlib.resources. Order: SCRINALIA_ROOT when set (a test or an operator
pointing at another tree), the package data, then the checkout an editable install
runs from.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

PACKAGE_DATA = "sqldata"  # the subdirectory of the package the wheel build fills


def _holds_both(root: Path) -> bool:
    return (root / "migrations").is_dir() and (root / "sql").is_dir()


def project_root() -> Path:
    """The directory holding sql/ and migrations/."""
    from scrinalia_workers.errors import ConfigError

    env = os.environ.get("SCRINALIA_ROOT")
    if env:
        if not _holds_both(Path(env)):
            raise ConfigError(f"SCRINALIA_ROOT={env} holds no migrations/ and sql/: unset it or point it at a checkout")
        return Path(env)
    data = resources.files("scrinalia_workers") / PACKAGE_DATA
    # an installed wheel is a directory on disk: yoyo reads its migrations by path
    if isinstance(data, Path) and _holds_both(data):
        return data
    checkout = Path(__file__).resolve().parents[2]
    if _holds_both(checkout):
        return checkout
    raise ConfigError(
        f"this scrinalia-workers package carries no migrations/ and sql/ (looked in {data} and {checkout}): "
        "install it from a built wheel (pip install .) or a checkout"
    )


def migrations_dir() -> Path:
    return project_root() / "migrations"


def sql_files() -> list[Path]:
    return sorted((project_root() / "sql").glob("*.sql"))


def migration_ids() -> list[str]:
    """The ids of this release's migrations, in order."""
    return sorted(
        p.name.removesuffix(".sql") for p in migrations_dir().glob("*.sql") if not p.name.endswith(".rollback.sql")
    )


def head() -> str:
    """The id of this release's last migration: the schema head its code needs.

    Written nowhere else in the shim; scrinalia.schema_head() (sql/70_status.sql) says
    the same in SQL, and tests/admin/test_migrations.py checks that the two agree."""
    return migration_ids()[-1]
