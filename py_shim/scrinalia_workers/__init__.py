"""scrinalia-workers: the job ledger, cron scheduler and retry policy, SQL-first."""

__version__ = "0.1.0"
