"""The scheduler daemon: holds the one-scheduler lock and runs the tick (`scrinalia-scheduler`)."""

from scrinalia_workers.scheduler.command import main
from scrinalia_workers.scheduler.daemon import Scheduler

__all__ = ["Scheduler", "main"]
