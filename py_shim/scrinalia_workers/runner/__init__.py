"""The reference runner: claims runs, calls their handlers, reports (`scrinalia-runner`).

daemon.py is the Runner and its loop; batch.py sees one claimed batch through, each
run's life written down in run_states.py; ledger.py makes the SQL calls; handler_thread.py
calls the handlers; wakeup.py wakes the main thread; command.py is the command line.
"""

from scrinalia_workers.runner.command import main
from scrinalia_workers.runner.daemon import Runner

__all__ = ["Runner", "main"]
