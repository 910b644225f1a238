"""The cyclic garbage collector of a daemon process, tuned once at its start.

A scheduler's pass or a runner's batch makes tens of thousands of short-lived objects
(rows, runs, log lines) that reference counting frees at once. With CPython's default
thresholds the collector still walks the young ones every 700 allocations, and every
so often the whole heap, start-up objects included: work that finds nothing and that
a due schedule or a queued run waits behind. So a daemon freezes what its start-up
made (modules, classes, settings: they live as long as the process) out of every
collection, and collects the youngest generation every YOUNG_THRESHOLD allocations.
Reference cycles are still collected, later; the older generations keep their
thresholds.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # allocations between two collections of the youngest generation


def tune_for_daemon() -> None:
    """Freezes the objects alive now and raises the youngest generation's threshold."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
