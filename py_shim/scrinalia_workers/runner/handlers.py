"""Loading a handlers module and calling a handler (the contract: docs/handlers.md).

A handlers module exposes HANDLERS: dict of worker name -> callable(run: dict); a
handler under "*" takes the runs of every worker the others do not name.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scrinalia_workers.errors import ConfigError
from scrinalia_workers.logs import one_line
from scrinalia_workers.runner.failure import check_return, describe_failure, summary
from scrinalia_workers.text import printable

Handler = Callable[[dict], Any]
ANY_WORKER = "*"  # a handler registered under "*" takes the runs of every worker
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass
class Outcome:
    """What a handler did: SUCCEEDED (with an optional summary) or FAILED (error, fingerprint)."""

    status: str
    error: str | None = None
    fingerprint: str | None = None
    summary: str | None = None


def load_handlers(module: str) -> dict[str, Handler]:
    """HANDLERS of the module, checked; ConfigError (one line) for anything unusable."""
    if not _MODULE.fullmatch(module or ""):
        raise ConfigError(f"--handlers {module!r} is not a Python module name (e.g. mypkg.handlers)")
    try:
        mod = _import(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name) and e.name.split(".")[0] == module.split(".")[0]:
            raise ConfigError(
                f"cannot import handlers module {module!r}: no module named {e.name!r} in the current "
                f"directory ({printable(os.getcwd())}) nor on the Python path: install it, or set "
                "PYTHONPATH to the directory that holds it (docs/handlers.md)"
            ) from None
        raise ConfigError(
            f"cannot import handlers module {module!r}: {one_line(describe_failure(e)[0].splitlines()[0])}"
        ) from None
    except BaseException as e:  # an import error, or the module's own code failing (even exiting)
        raise ConfigError(
            f"cannot import handlers module {module!r}: {one_line(describe_failure(e)[0].splitlines()[0])}"
        ) from None
    handlers = getattr(mod, "HANDLERS", None)
    if not isinstance(handlers, dict) or not handlers:
        raise ConfigError(f"handlers module {module!r} has no HANDLERS dict of worker name -> callable")
    for name, fn in handlers.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"handlers module {module!r}: HANDLERS key {name!r} is not a worker name")
        if not callable(fn):
            raise ConfigError(f"handlers module {module!r}: HANDLERS[{name!r}] is not callable")
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise ConfigError(
                f"handlers module {module!r}: HANDLERS[{name!r}] is async; the runner calls plain functions"
            )
    return dict(handlers)


def _import(module: str) -> Any:
    """The module, found as `python -m` would find it: the console script's sys.path lacks
    the current directory, where an operator's handlers module often is. The directory
    goes at the end of the path, so that it shadows no installed module."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        top = module.split(".")[0]
        if e.name != top or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module)


def handler_for(handlers: dict[str, Handler], worker_name: str) -> Handler | None:
    if worker_name in handlers:
        return handlers[worker_name]
    return handlers.get(ANY_WORKER)


def call(handler: Handler, run: dict) -> Outcome:
    """Runs the handler on a copy of the run; never raises, whatever the handler does."""
    try:
        value = handler(dict(run))
    except BaseException as e:  # SystemExit, KeyboardInterrupt, custom BaseExceptions too
        error, fp = describe_failure(e)
        return Outcome("FAILED", error, fp)
    try:
        bad = check_return(value)
        if bad is not None:
            return Outcome("FAILED", *bad)
        return Outcome("SUCCEEDED", summary=summary(value))
    except BaseException as e:  # a returned object hostile enough to break the check
        return Outcome("FAILED", *describe_failure(e))
