"""The `scrinalia-workers` command line."""

from scrinalia_workers.cli.app import main

__all__ = ["main"]
