"""What to do about each kind of alert of scrinalia.current_alerts(): the words
`status` and the web view print beside an alert (docs/operate.md, What to watch).
The workers' alerts' messages already name the run and the command; the advice
says where to look."""

from __future__ import annotations

ADVICE = {
    "SCHEDULER_UNHEALTHY": "start a scheduler (scrinalia-scheduler), or see why none holds the lock and "
    "heartbeats: docs/operate.md, One scheduler",
    "FAILED_AFTER_ALL_ATTEMPTS": "read the attempts' errors (runs WORKER --timeline) and fix the cause; the next "
    "period runs as scheduled, or re-run it once it is fixed (runs rerun RUN_ID)",
    "SCHEDULE_OVERDUE": "is a scheduler running? See the health; a paused schedule is never overdue",
    "SCHEDULE_SET_ASIDE": "fix the cron or the zone with `schedule put` (it clears the error), or the host's tzdata",
    "LEASE_REAPED": "did the runner named die? Read its log; raise --lease if its handler outlives it",
    "INSTANT_REPAIRED": "check the database host's clock, and whether someone wrote the instant by hand",
    "RUN_OVERRUNNING": "read the runner's log for its handler; cancel the run (cancel RUN_ID) if it is stuck",
    "SCHEDULE_STARVED": "see what holds the worker's slot (status, runs WORKER); cancel it if it is stuck",
    "RUN_UNCLAIMED": "start a runner whose --workers include the worker, under a runner login",
    "RUN_TIMED_OUT": "make the handler finish sooner, or raise the worker's limit (scrinalia.set_max_run_time)",
    "RUNNER_STUCK": "check that the runner's supervisor restarts it; make the handlers named stop when told "
    "(context.check(), docs/handlers.md) or time out their calls",
}
OTHER_ADVICE = "see docs/operate.md, What to watch"


def advice(kind: str) -> str:
    return ADVICE.get(kind, OTHER_ADVICE)
