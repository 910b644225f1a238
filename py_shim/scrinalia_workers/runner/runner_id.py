"""A runner's id: what it writes as the lease owner of the runs it claims."""

from __future__ import annotations

import os
import re
import socket

from scrinalia_workers.policy import MAX_RUNNER_ID_LENGTH

# What scrinalia.check_runner accepts (docs/sql-api.md, claim_next).
RUNNER_ID = re.compile(rf"[A-Za-z0-9_.:@/-]{{1,{MAX_RUNNER_ID_LENGTH}}}")


def default_runner_id() -> str:
    """host:pid, the host name's other characters replaced by "-"."""
    host = re.sub(r"[^A-Za-z0-9_.:@/-]", "-", socket.gethostname())[:180] or "runner"
    return f"{host}:{os.getpid()}"
