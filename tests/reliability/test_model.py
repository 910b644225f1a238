"""Scenario C: the real SQL functions against a plain-Python model of ADR 0015.

Hypothesis draws schedules (real crons, real zones with DST) and a program of
steps: clock advances (short ones: the scheduler is up; long ones: it was down),
scheduler passes (reap, create_retries, due + tick, as the daemon does them),
claims, heartbeats, finishes, cancels, manual enqueues, pauses and resumes.

The clock is data. Virtual time = the database's now() + `offset`; to let Δ pass,
every timestamp in the ledger moves back by Δ and `offset` grows by Δ, so the SQL's
own now() keeps deciding, as in production. Δ always carries a few odd
microseconds so that the shift can never land one period on another's instant
(the unique period index is checked row by row during the UPDATE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import make_worker
from invariants import check_all, retry_window
from scrinalia_workers import cron

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Sao_Paulo",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "America/St_Johns",
]
CRONS = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 2 * * *",
    "15 1-3 * * *",
    "0 0 * * MON",
    "0 6 * * 1-5",
    "0 0 1 * *",
    "*/15 2 * * *",
    "0 */6 * * *",
    "59 23 * * *",
]
# starting instants next to DST changes of the zones above (and one plain day)
STARTS = [
    datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
    datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
    datetime(2026, 3, 8, 6, 30, tzinfo=UTC),
    datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
    datetime(2026, 4, 4, 14, 45, tzinfo=UTC),
    datetime(2026, 10, 3, 15, 20, tzinfo=UTC),
    datetime(2026, 9, 26, 13, 10, tzinfo=UTC),
    datetime(2026, 6, 15, 12, 0, tzinfo=UTC),
]
WORKERS = ["m0", "m1", "m2"]
EXAMPLES = int(os.environ.get("RELIABILITY_MODEL_EXAMPLES", "150"))


@dataclass
class Run:
    run_id: int
    worker: str
    trigger: str
    attempt: int
    created: datetime
    scheduled_for: datetime | None = None
    retry_of: int | None = None
    not_before: datetime | None = None
    status: str = "QUEUED"
    lease_expires: datetime | None = None
    lease: timedelta | None = None
    token: object = None
    pending: bool = False


@dataclass
class Sched:
    cron: str
    tz: str
    enabled: bool = True
    next_run: datetime | None = None


@dataclass
class Model:
    scheds: dict[str, Sched]
    runs: dict[int, Run] = field(default_factory=dict)

    def live(self, worker: str) -> Run | None:
        return next((r for r in self.runs.values() if r.worker == worker and r.status in ("QUEUED", "RUNNING")), None)

    def owed(self, worker: str) -> Run | None:
        return next((r for r in self.runs.values() if r.worker == worker and r.pending), None)


class Sim:
    def __init__(self, db: psycopg.Connection, model: Model, start: datetime):
        self.db = db
        self.m = model
        self.offset = start - self.db_now()
        self._keep_clock()
        self.log: list[str] = []

    def _keep_clock(self) -> None:
        self.db.execute("UPDATE public.model_clock SET shift = %s", (self.offset,))

    def db_now(self) -> datetime:
        return self.db.execute("SELECT now()").fetchone()[0]

    def vnow(self) -> datetime:
        return self.db_now() + self.offset

    # -- the clock ------------------------------------------------------------
    def advance(self, seconds: float, scheduler_up: bool = False) -> None:
        self._shift(seconds)
        if scheduler_up:
            self.scheduler_pass()

    def work(self, lease_s: int, ok: bool) -> None:
        """A runner claims and, at once, reports (the commonest life of a run)."""
        before = {r.run_id for r in self.m.runs.values() if r.status == "RUNNING"}
        self.claim(lease_s)
        new = [r for r in self.m.runs.values() if r.status == "RUNNING" and r.run_id not in before]
        if new:
            running = sorted((r for r in self.m.runs.values() if r.status == "RUNNING"), key=lambda r: r.run_id)
            self.finish(running.index(new[0]), ok)

    def _shift(self, seconds: float) -> None:
        d = timedelta(seconds=seconds, microseconds=137)
        for sql in (
            """
            UPDATE scrinalia.archive_worker_runs SET created_at = created_at - %(d)s,
                   started_at = started_at - %(d)s, finished_at = finished_at - %(d)s,
                   not_before = not_before - %(d)s, lease_expires_at = lease_expires_at - %(d)s,
                   heartbeat_at = heartbeat_at - %(d)s, scheduled_for = scheduled_for - %(d)s""",
            """
            UPDATE scrinalia.archive_worker_schedules SET next_run_at = next_run_at - %(d)s,
                   last_enqueued_at = last_enqueued_at - %(d)s, last_skipped_at = last_skipped_at - %(d)s,
                   created_at = created_at - %(d)s, updated_at = updated_at - %(d)s""",
            "UPDATE scrinalia.scheduler_state SET last_tick_at = last_tick_at - %(d)s",
        ):
            self.db.execute(sql, {"d": d})
        self.offset += d
        self._keep_clock()

    def v(self, ts: datetime | None) -> datetime | None:
        return None if ts is None else ts + self.offset

    # -- the scheduler's pass ---------------------------------------------------
    def scheduler_pass(self) -> None:
        m = self.m
        with self.db.transaction():
            t = self.vnow()
            reaped = {r[0] for r in self.db.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")}
            expect = {r.run_id for r in m.runs.values() if r.status == "RUNNING" and r.lease_expires <= t}
            assert reaped == expect, (reaped, expect)
            for rid in reaped:
                r = m.runs[rid]
                r.status, r.token = "INTERRUPTED", None
                r.pending = r.trigger == "SCHEDULE" and r.attempt < 3

            got = self.db.execute(
                "SELECT run_id, retry_of, worker_name, attempt, not_before FROM scrinalia.create_retries()"
            ).fetchall()
            want = [
                p for p in sorted(m.runs.values(), key=lambda r: r.run_id) if p.pending and m.live(p.worker) is None
            ]
            assert sorted(g[1] for g in got) == [p.run_id for p in want], (got, want)
            for rid, parent_id, w, attempt, nb in got:
                p = m.runs[parent_id]
                lo, hi = retry_window(p.attempt)
                wait = (self.v(nb) - t).total_seconds()
                assert attempt == p.attempt + 1 and w == p.worker
                assert lo - 1e-3 <= wait <= hi + 1e-3, (wait, lo, hi)
                p.pending = False
                m.runs[rid] = Run(rid, w, "SCHEDULE", attempt, t, p.scheduled_for, parent_id, self.v(nb))

            due = self.db.execute(
                "SELECT worker_name, cron, timezone, next_run_at FROM scrinalia.due_schedules()"
            ).fetchall()
            want_due = sorted(w for w, s in m.scheds.items() if s.enabled and (s.next_run is None or s.next_run <= t))
            assert sorted(d[0] for d in due) == want_due
            if not due:
                return
            nexts = cron.next_occurrences([(d[1], d[2]) for d in due], t)
            dec = self.db.execute(
                "SELECT worker_name, decision, run_id, scheduled_for, next_run_at "
                "FROM scrinalia.tick(%s::text[], %s::timestamptz[], 'model')",
                ([d[0] for d in due], [n - self.offset for n in nexts]),
            ).fetchall()
            assert sorted(d[0] for d in dec) == sorted(d[0] for d in due)
            # tick() answers in worker order, not in due order: match by name
            next_of = {d[0]: n for d, n in zip(due, nexts)}
            for w, decision, rid, sf, nxt in dec:
                n = next_of[w]
                s = m.scheds[w]
                was = s.next_run
                if was is None:
                    want = "ARMED"
                elif m.live(w) is not None or m.owed(w) is not None:
                    want = "SKIPPED"
                else:
                    want = "ENQUEUED"
                assert decision == want, (w, decision, want, t)
                assert self.v(sf) == was and self.v(nxt) == n == cron.next_occurrence(s.cron, s.tz, t)
                assert n > t
                if want == "ENQUEUED":
                    m.runs[rid] = Run(rid, w, "SCHEDULE", 1, t, was)
                s.next_run = n
                self.log.append(f"{t:%Y-%m-%d %H:%M:%S} {w} {decision} {was}")

    # -- a runner and an operator -------------------------------------------------
    def claim(self, lease_s: int) -> None:
        t0 = self.vnow()
        row = self.db.execute(
            "SELECT run_id, lease_token, lease_expires_at, now() "
            "FROM scrinalia.claim_next('model-runner', make_interval(secs => %s))",
            (lease_s,),
        ).fetchone()
        if row is None:
            # nothing claimable at the claim's instant (>= t0): nothing was at t0 either
            assert not [
                r for r in self.m.runs.values() if r.status == "QUEUED" and (r.not_before is None or r.not_before <= t0)
            ]
            return
        rid, token, exp, now = row
        t = now + self.offset
        claimable = [
            r for r in self.m.runs.values() if r.status == "QUEUED" and (r.not_before is None or r.not_before <= t)
        ]
        assert claimable and rid == min(claimable, key=lambda r: (r.created, r.run_id)).run_id
        r = self.m.runs[rid]
        r.status, r.token, r.lease_expires, r.lease = "RUNNING", token, self.v(exp), timedelta(seconds=lease_s)

    def _running(self, pick: int) -> Run | None:
        running = sorted((r for r in self.m.runs.values() if r.status == "RUNNING"), key=lambda r: r.run_id)
        return running[pick % len(running)] if running else None

    def finish(self, pick: int, ok: bool) -> None:
        r = self._running(pick)
        if r is None:
            return
        status = "SUCCEEDED" if ok else "FAILED"
        try:
            row = self.db.execute(
                "SELECT status, retry_pending, now() FROM scrinalia.finish(%s, %s, %s, 'model')",
                (r.run_id, r.token, status),
            ).fetchone()
        except psycopg.Error as e:
            assert e.sqlstate == "SW020" and r.lease_expires <= self.vnow(), e
            return  # the reaper will make it INTERRUPTED
        assert r.lease_expires > row[2] + self.offset
        r.status, r.token = status, None
        r.pending = not ok and r.trigger == "SCHEDULE" and r.attempt < 3
        assert row[:2] == (status, r.pending)

    def heartbeat(self, pick: int) -> None:
        r = self._running(pick)
        if r is None:
            return
        try:
            exp, now = self.db.execute("SELECT scrinalia.heartbeat(%s, %s), now()", (r.run_id, r.token)).fetchone()
        except psycopg.Error as e:
            assert e.sqlstate == "SW020" and r.lease_expires <= self.vnow(), e
            return
        assert r.lease_expires > now + self.offset
        r.lease_expires = self.v(exp)
        assert r.lease_expires == now + self.offset + r.lease

    def cancel(self, pick: int) -> None:
        queued = sorted((r for r in self.m.runs.values() if r.status == "QUEUED"), key=lambda r: r.run_id)
        if not queued:
            return
        r = queued[pick % len(queued)]
        assert self.db.execute("SELECT status FROM scrinalia.cancel_run(%s)", (r.run_id,)).fetchone() == ("CANCELLED",)
        r.status = "CANCELLED"

    def manual(self, w: str, trigger: str) -> None:
        t = self.vnow()
        try:
            row = self.db.execute(
                "SELECT run_id, created_at FROM scrinalia.enqueue(%s, '{}', %s)", (w, trigger)
            ).fetchone()
        except psycopg.Error as e:
            # busy: a live run, or a failed attempt whose retry is owed (it owns the slot)
            assert e.sqlstate == "SW010" and (self.m.live(w) is not None or self.m.owed(w) is not None), e
            return
        assert self.m.live(w) is None and self.m.owed(w) is None
        self.m.runs[row[0]] = Run(row[0], w, trigger, 1, self.v(row[1]))
        assert self.v(row[1]) >= t

    def toggle(self, w: str, enabled: bool) -> None:
        s = self.m.scheds[w]
        self.db.execute("SELECT scrinalia.set_schedule_enabled(%s, %s)", (w, enabled))
        if not (s.enabled and enabled):
            s.next_run = None
        s.enabled = enabled

    # -- the end --------------------------------------------------------------
    def compare(self) -> None:
        rows = self.db.execute(
            "SELECT run_id, worker_name, status, trigger, attempt, retry_of, scheduled_for, "
            "retry_pending FROM scrinalia.archive_worker_runs ORDER BY run_id"
        ).fetchall()
        assert [(r[0], r[1], str(r[2]), str(r[3]), r[4], r[5], self.v(r[6]), r[7]) for r in rows] == [
            (r.run_id, r.worker, r.status, r.trigger, r.attempt, r.retry_of, r.scheduled_for, r.pending)
            for r in sorted(self.m.runs.values(), key=lambda r: r.run_id)
        ]
        nexts = dict(self.db.execute("SELECT worker_name, next_run_at FROM scrinalia.archive_worker_schedules"))
        assert {w: self.v(n) for w, n in nexts.items()} == {w: s.next_run for w, s in self.m.scheds.items()}


step = st.one_of(
    # time passes; with the scheduler up (True) a pass follows at once, else it was down
    st.tuples(
        st.just("advance"),
        st.one_of(st.integers(1, 120), st.integers(120, 3600), st.integers(3600, 3 * 86400)),
        st.booleans(),
    ),
    st.tuples(st.just("work"), st.integers(30, 900), st.booleans()),
    st.tuples(st.just("work"), st.integers(30, 900), st.booleans()),
    st.just(("pass",)),
    st.just(("pass",)),
    st.just(("pass",)),
    st.tuples(st.just("claim"), st.integers(5, 120)),  # claimed and never reported: the runner died
    st.tuples(st.just("claim"), st.integers(30, 900)),
    st.tuples(st.just("finish"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("heartbeat"), st.integers(0, 5)),
    st.tuples(st.just("cancel"), st.integers(0, 5)),
    st.tuples(st.just("manual"), st.sampled_from(WORKERS), st.sampled_from(["MANUAL", "CLI"])),
    st.tuples(st.just("toggle"), st.sampled_from(WORKERS), st.booleans()),
)
schedule = st.tuples(st.sampled_from(CRONS), st.sampled_from(ZONES))


# The tick refuses a next instant that is not an occurrence of the cron: here the
# instants it is handed are occurrences in virtual time (now() + offset), so in this
# database its check reads them in virtual time (model_clock, kept by Sim), the same
# rule (cron_fires_at) a few odd microseconds away.
VIRTUAL_REFUSAL = """
CREATE TABLE public.model_clock (shift interval NOT NULL);
INSERT INTO public.model_clock VALUES (interval '0');
CREATE OR REPLACE FUNCTION scrinalia.tick_instant_refusal(p_cron text, p_zone text, p_at timestamptz)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF scrinalia.cron_fires_at(p_cron, p_zone, p_at + (SELECT shift FROM public.model_clock)) THEN
        RETURN NULL;
    END IF;
    RETURN format('refused in virtual time: %s', p_at + (SELECT shift FROM public.model_clock));
END $$;
"""


@pytest.fixture
def model_db(db):
    for w in WORKERS:
        make_worker(db, w)
    db.execute(VIRTUAL_REFUSAL)
    return db


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    scheds=st.lists(schedule, min_size=1, max_size=len(WORKERS)),
    start=st.sampled_from(STARTS),
    program=st.lists(step, min_size=10, max_size=80),
)
def test_sql_follows_the_model(model_db, scheds, start, program):
    db = model_db
    db.execute("TRUNCATE scrinalia.archive_worker_runs, scrinalia.archive_worker_schedules RESTART IDENTITY")
    db.execute("UPDATE scrinalia.scheduler_state SET last_tick_at = NULL, last_tick_by = NULL, ticks = 0")
    model = Model({WORKERS[i]: Sched(c, tz) for i, (c, tz) in enumerate(scheds)})
    for w, s in model.scheds.items():
        db.execute("SELECT scrinalia.put_schedule(%s, %s, %s)", (w, s.cron, s.tz))
    sim = Sim(db, model, start)
    for op, *args in program + [("pass",)]:
        if op == "toggle" and args[0] not in model.scheds:
            continue
        if op == "manual" and args[0] not in model.scheds:
            continue
        getattr(sim, {"pass": "scheduler_pass"}.get(op, op))(*args)
        assert check_all(db, settled_at=None) == []
    sim.compare()
    assert check_all(db) == []
