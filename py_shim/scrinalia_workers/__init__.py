"""scrinalia-workers: the job ledger, cron scheduler and retry policy, SQL-first."""

from importlib import metadata as _metadata

try:
    # one home for the version: pyproject.toml, read from the installed package's metadata
    __version__ = _metadata.version("scrinalia-workers")
except _metadata.PackageNotFoundError:  # run from a tree that was never installed
    __version__ = "0+unknown"
