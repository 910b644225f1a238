"""A handler for every worker ("*"), driven by the run's options: for load and fault
tests only. Never give it to a runner beside real workers: it would run their runs
with simulated work (the demo set-up uses demo_handlers, which names its workers)."""

from __future__ import annotations

from scrinalia_workers.demo.handlers import DEMO_OPTIONS, SimulatedFailure, work

__all__ = ["DEMO_OPTIONS", "SimulatedFailure", "work", "HANDLERS"]

HANDLERS = {"*": work}
