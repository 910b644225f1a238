"""Every kind of alert current_alerts() can return has its own advice in `status` and
the web view (presentation/advice.py), not the catch-all."""

from __future__ import annotations

import re
from pathlib import Path

from scrinalia_workers.presentation.advice import ADVICE

ALERTS_SQL = Path(__file__).resolve().parents[2] / "sql" / "88_alerts.sql"


def test_every_alert_kind_has_its_advice():
    body = ALERTS_SQL.read_text().split("FUNCTION scrinalia.current_alerts(", 1)[1].split("$$;", 1)[0]
    kinds = set(re.findall(r"SELECT '([A-Z_]+)'", body))
    assert {"SCHEDULER_UNHEALTHY", "RUN_TIMED_OUT", "RUNNER_STUCK"} <= kinds
    assert kinds == set(ADVICE), {"without advice": kinds - set(ADVICE), "advice of no kind": set(ADVICE) - kinds}
