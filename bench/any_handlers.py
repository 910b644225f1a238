"""The reference runner's handlers for the drain benchmark: one empty handler for
every worker ("*").

    python -m scrinalia_workers.runner --handlers bench.any_handlers ...
"""

from bench.empty_handlers import noop

HANDLERS = {"*": noop}
