"""The reference runner's handlers for the latency benchmark: an empty one per bench worker.

    python -m scrinalia_workers.runner --handlers bench.empty_handlers ...

The runner claims only the workers it has a handler for, so every name the
benchmark seeds (seed.worker_name) is listed.
"""

from bench.seed import worker_name


def noop(run: dict) -> None:
    """Does nothing: the figure is the protocol's own latency."""


HANDLERS = {worker_name(i): noop for i in range(1000)}
