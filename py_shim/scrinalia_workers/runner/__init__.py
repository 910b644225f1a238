"""The reference runner: claims runs, calls their handlers, reports (`scrinalia-runner`).

daemon.py is the Runner and its loop; run.py is a claimed run, typed (ClaimedRun), whose
life is written down in run_states.py; batch.py sees the claimed runs through (the one
path from a handler's outcome to finish_runs() to the run's line); ledger.py makes the
SQL calls; run_lines.py writes the run's lines; handler_thread.py calls the handlers,
context.py tells a handler its run must stop; wakeup.py wakes the main thread;
command.py is the command line.
"""

from scrinalia_workers.runner.command import main
from scrinalia_workers.runner.daemon import Runner

__all__ = ["Runner", "main"]
