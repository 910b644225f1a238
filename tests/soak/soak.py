"""A fault soak: the real daemons under load while faults are injected on a seeded
timetable, then the ledger's invariants checked.

    python tests/soak/soak.py --minutes 20        (make soak MINUTES=20)
    SOAK_SEED=1234 python tests/soak/soak.py      (the same timetable again)

The load: SCHEDULES every-minute schedules spread over zones with daylight-saving rules,
two schedulers and three runners, each under a login of its own that is a member of
scrinalia_scheduler or scrinalia_runner only, on a primary with a streaming replica
(the daemons' DSN names both, target_session_attrs=read-write). The handlers
(soak_handlers.py) fail sometimes, run slowly, overrun, or hang when told to. A
daemon that exits is started again, as compose's `restart:` would, and counted.

The faults (soak_faults.py) come on a timetable drawn from the seed alone; the seed
is printed at the start and named by a failed run. At the end: `N faults of K kinds`,
then the invariants (tests/reliability/invariants.py: no period twice, no period
lost without a logged reason, every retry in its window, at most one active run per
worker, sampled throughout), and connections, descriptors and memory flat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
for _p in (HERE, TESTS / "reliability", TESTS):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from infra import require_server_binaries  # noqa: E402
from invariants import Decision, busy_slots, check_all, lost_periods  # noqa: E402
from scrinalia_workers.admin.migrate import migrate  # noqa: E402
from scrinalia_workers.testkit.waiting import wait_for  # noqa: E402
from soak_daemons import Slot, Supervisor, resources  # noqa: E402
from soak_faults import DAEMON_KINDS, DATABASE_KINDS, KINDS, Injector, Nodes, timetable  # noqa: E402
from soak_handlers import MAX_RUN_SECONDS  # noqa: E402

SCHEDULES = int(os.environ.get("SOAK_SCHEDULES", "1000"))
ZONES = (
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "America/Sao_Paulo",
    "America/St_Johns",
    "Europe/Dublin",
    "Africa/Casablanca",
    "America/Havana",
)
DBNAME = "soak"
SCHEDULERS = ("s1", "s2")
RUNNERS = ("r1", "r2", "r3")
# sessions each daemon keeps: a scheduler its lock session and its work session, a runner one
SESSIONS = {"scheduler": 2, "runner": 1}
SAMPLE_EVERY = 5.0  # seconds between two samples of the live runs
# A daemon's descriptors and memory are sampled with the live runs, from USAGE_AFTER
# seconds of its life (imports and first connections done); one that lived on a
# quarter of the run (a minute at least, RESOURCE_SPAN at most: kill -9 comes often)
# after its first sample may not grow more.
USAGE_AFTER = 30.0
RESOURCE_SPAN = 180.0
FD_GROWTH = 8
RSS_GROWTH_KIB = 32 * 1024
SETTLE_WITHIN = 120.0  # seconds for the daemons to be back and caught up once the faults end


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


@dataclass
class Report:
    seed: int
    minutes: float
    faults: Counter = field(default_factory=Counter)
    restarts: dict = field(default_factory=dict)
    invariants: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        n, k = sum(self.faults.values()), len(self.faults)
        kinds = ", ".join(f"{kind} {self.faults[kind]}" for kind in KINDS if self.faults[kind])
        return f"{n} faults of {k} kinds ({kinds})"


class Admin:
    """The soak's own superuser session on whichever node takes writes; it reconnects."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.conn: psycopg.Connection | None = None

    def __call__(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        return self.conn

    def query(self, sql: str, params=None, tries: int = 30) -> list[tuple]:
        for i in range(tries):
            try:
                cur = self().execute(sql, params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self.conn = None
                if i == tries - 1:
                    raise
                time.sleep(1)
        return []


def _create_logins(admin: Admin) -> dict[str, str]:
    """A login per daemon (a member of its group only), a reader's and one in no group."""
    logins = {name: f"soak_{name}" for name in SCHEDULERS + RUNNERS + ("reader", "nobody")}
    for name, login in logins.items():
        admin.query(f'CREATE ROLE "{login}" LOGIN')
        group = "scheduler" if name in SCHEDULERS else "runner" if name in RUNNERS else name
        if group != "nobody":
            admin.query(f'GRANT "scrinalia_{group}" TO "{login}"')
    return logins


def _seed(admin: Admin) -> datetime:
    """SCHEDULES workers, every minute in one of ZONES, armed for the next minute."""
    admin.query(
        "INSERT INTO scrinalia.archive_workers (worker_name) "
        "SELECT 'soak' || lpad(g::text, 5, '0') FROM generate_series(1, %s) g",
        (SCHEDULES,),
    )
    admin.query(
        """
        INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)
        SELECT 'soak' || lpad(g::text, 5, '0'), '* * * * *', (%s::text[])[1 + g %% %s],
               date_trunc('minute', now()) + interval '1 minute'
          FROM generate_series(1, %s) g""",
        (list(ZONES), len(ZONES), SCHEDULES),
    )
    admin.query(
        "SELECT scrinalia.set_max_run_time(worker_name, %s * interval '1 second') FROM scrinalia.archive_workers",
        (MAX_RUN_SECONDS,),
    )
    return admin.query("SELECT now()")[0][0]


class Sampler(threading.Thread):
    """Samples the live runs (never two for a worker) every SAMPLE_EVERY seconds, and
    each daemon's descriptors and memory."""

    def __init__(self, admin: Admin, lock: threading.Lock, slots: list[Slot]):
        super().__init__(daemon=True, name="soak sampler")
        self.admin, self.lock, self.slots = admin, lock, slots
        self.samples = 0
        self.violations: list[str] = []
        self.done = threading.Event()

    def sample_usage(self) -> None:
        now = time.monotonic()
        for s in self.slots:
            inc = s.current
            if inc.clock_offset or now - inc.started < USAGE_AFTER or inc.proc.popen.poll() is not None:
                continue
            usage = resources(inc.proc.pid)
            if usage is not None:
                inc.usage.append((now, *usage))

    def run(self) -> None:
        while not self.done.wait(SAMPLE_EVERY):
            self.sample_usage()
            try:
                with self.lock:
                    found = busy_slots(self.admin())
            except psycopg.Error:
                self.admin.conn = None
                continue
            self.samples += 1
            self.violations += found


def _logged_skips(slots: list[Slot]) -> list[Decision]:
    """The skips the schedulers logged (the tick's own instant: their clock, moved back
    by the offset faketime gave it)."""
    out = []
    for s in slots:
        for inc in s.incarnations:
            if not inc.log.exists():
                continue
            for line in inc.log.read_text(errors="replace").splitlines():
                if '"skipped"' not in line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("event") != "skipped" or not ev.get("scheduled_for"):
                    continue
                at = datetime.fromisoformat(ev["ts"]) - timedelta(seconds=inc.clock_offset)
                out.append(Decision(ev["worker"], "SKIPPED", datetime.fromisoformat(ev["scheduled_for"]), at))
    return out


def _log_tally(slots: list[Slot]) -> dict[str, int]:
    """The daemons' warning and error lines by event (a traceback or a line that is not
    JSON counted as such), and how often a scheduler took the lock."""
    tally: Counter[str] = Counter()
    for s in slots:
        for inc in s.incarnations:
            if not inc.log.exists():
                continue
            for line in inc.log.read_text(errors="replace").splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    tally["(not a JSON line)"] += 1
                    continue
                if not isinstance(ev, dict):
                    continue
                if ev.get("level") in ("warning", "error") or ev.get("event") == "lock acquired":
                    tally[f"{s.kind} {ev.get('event')} ({ev.get('level')})"] += 1
    return dict(tally.most_common())


def _lost(admin: Admin, window: tuple[datetime, datetime], skips: list[Decision]) -> tuple[list[str], int, int]:
    """Periods without a run or a logged skip (the checker of invariants.py, its
    enqueue decisions read from the ledger), once a skip the database counted but
    whose log line died with a kill -9 is allowed for; and the periods checked."""
    conn = admin()
    by_worker: dict[str, list[Decision]] = {}
    for d in skips:
        by_worker.setdefault(d.worker, []).append(d)
    for w, sf, at in conn.execute(
        "SELECT worker_name, scheduled_for, created_at FROM scrinalia.archive_worker_runs "
        "WHERE trigger = 'SCHEDULE' AND attempt = 1"
    ):
        by_worker.setdefault(w, []).append(Decision(w, "ENQUEUED", sf, at))
    lost: list[str] = []
    periods = unlogged = 0
    for w, tz, skipped_count in conn.execute(
        "SELECT worker_name, timezone, skipped_count FROM scrinalia.archive_worker_schedules ORDER BY 1"
    ).fetchall():
        mine = by_worker.get(w, [])
        found = lost_periods(conn, w, "* * * * *", tz, window, mine, grace=timedelta(seconds=1))
        periods += _periods(window, tz)
        logged = sum(1 for d in mine if d.decision == "SKIPPED")
        if found and len(found) <= skipped_count - logged:
            unlogged += len(found)  # skips the ledger counted; their lines died with the scheduler
            continue
        lost += found
    return lost, periods, unlogged


def _periods(window: tuple[datetime, datetime], tz: str) -> int:
    start, end = window
    first = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    last = (end - timedelta(seconds=1)).replace(second=0, microsecond=0)
    return max(0, int((last - first).total_seconds() // 60) + 1)


def run(minutes: float, seed: int, workdir: Path | None = None) -> Report:
    report = Report(seed, minutes)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="scrinalia-soak-"))
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    control = workdir / "control"
    control.mkdir(exist_ok=True)
    say(f"soak: seed {seed}, {minutes:g} min, {SCHEDULES} schedules; logs in {workdir}")
    say(f"replay: SOAK_SEED={seed} make soak MINUTES={minutes:g}")
    faults = timetable(seed, minutes, list(SCHEDULERS + RUNNERS), list(RUNNERS))
    for f in faults:
        say(f"  planned t+{f.at:6.1f}s {f.describe()}")

    nodes = Nodes(require_server_binaries())
    slots: list[Slot] = []
    supervisor = Supervisor(slots)
    sampler: Sampler | None = None
    injector: Injector | None = None
    admin = Admin(nodes.primary.dsn())
    try:
        admin.query(f'CREATE DATABASE "{DBNAME}"')
        migrate(nodes.primary.dsn(DBNAME), create_groups=True)
        logins = _create_logins(admin)
        nodes.start_replica()
        admin = Admin(nodes.dsn("postgres", DBNAME))
        started_at = _seed(admin)
        lock_key = admin.query("SELECT scrinalia.scheduler_lock_key()")[0][0]
        env = {
            "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
            "SOAK_CONTROL_DIR": str(control),
        }
        for name in SCHEDULERS + RUNNERS:
            kind = "scheduler" if name in SCHEDULERS else "runner"
            slots.append(Slot(name, kind, nodes.dsn(logins[name], DBNAME), workdir / "logs", env))
        for s in slots:
            s.start()
        supervisor.start()
        sampler = Sampler(admin, threading.Lock(), slots)
        sampler.start()
        injector = Injector(
            {s.name: s for s in slots},
            nodes,
            admin,
            lambda who: nodes.dsn(logins[who], DBNAME),
            lock_key,
            control,
            say,
        )
        sampler.lock = injector.db_lock
        t0 = time.monotonic()
        lanes = [
            threading.Thread(target=injector.lane, args=([f for f in faults if f.kind in kinds], t0), daemon=True)
            for kinds in (DAEMON_KINDS, DATABASE_KINDS)
        ]
        for lane in lanes:
            lane.start()
        time.sleep(max(0.0, t0 + minutes * 60 - time.monotonic()))
        injector.abort.set()
        for lane in lanes:
            lane.join(HANG_JOIN)
        say("faults over; waiting for the daemons to be back and caught up")

        _settle(admin, slots)
        report.figures["connections"] = _connections(admin, logins, report)
        sampler.sample_usage()
        _resources(slots, minutes, report)
        for s in slots:
            if s.kind == "runner":
                code = s.stop()
                if code != 0:
                    report.problems.append(f"{s.name} stopped with {code}")
        settled_at = _retry_pass(admin)
        sampler.done.set()
        sampler.join()
        window_end = admin.query("SELECT min(next_run_at) FROM scrinalia.archive_worker_schedules")[0][0]
        with injector.db_lock:
            conn = admin()
            doubled = check_all(conn, settled_at=settled_at)
        for s in slots:
            if s.kind == "scheduler":
                code = s.stop()
                if code != 0:
                    report.problems.append(f"{s.name} stopped with {code}")
        supervisor.done.set()
        lost, periods, unlogged = _lost(admin, (started_at, window_end), _logged_skips(slots))
        runs = dict(admin.query("SELECT status, count(*) FROM scrinalia.archive_worker_runs GROUP BY 1"))
        retries = admin.query("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE retry_of IS NOT NULL")[0][0]
        report.faults = Counter(f.kind for f, _ in injector.done)
        report.restarts = {s.name: dict(s.restarts()) for s in slots}
        report.invariants = {
            "ledger problems (doubled, live twice, retry shape, owed retries)": len(doubled),
            "live runs sampled twice for a worker": len(sampler.violations),
            "samples": sampler.samples,
            "periods checked": periods,
            "periods lost without a logged reason": len(lost),
            "skips counted by the ledger whose log line died with its scheduler": unlogged,
        }
        report.figures.update(
            {
                "daemon lines": _log_tally(slots),
                "runs": runs,
                "retries": retries,
                "window": [started_at.isoformat(), window_end.isoformat()],
            }
        )
        report.problems += doubled + sampler.violations + lost + injector.problems
        for s in slots:
            report.problems += s.unexpected_exits()
        return report
    except BaseException as e:
        report.problems.append(f"the soak itself failed: {type(e).__name__}: {e}")
        raise
    finally:
        supervisor.done.set()
        if injector is not None:
            injector.abort.set()
        if sampler is not None:
            sampler.done.set()
        for s in slots:
            for inc in s.incarnations:
                if inc.proc.popen.poll() is None:
                    inc.proc.kill(signal.SIGCONT)  # a stopped process too
                    inc.proc.kill()
                inc.proc.popen.wait()
        nodes.stop()


HANG_JOIN = 180.0  # seconds a lane may take to finish the fault it is in (a hang's wait, a failover)


def _settle(admin: Admin, slots: list[Slot]) -> None:
    """Every daemon running, and every period that has passed decided."""

    def settled() -> bool:
        if not all(s.ready() for s in slots):
            return False
        behind = admin.query(
            "SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at <= now() - interval '5 seconds'"
        )[0][0]
        return behind == 0

    wait_for(settled, timeout=SETTLE_WITHIN, interval=1, what="the daemons back and caught up")


def _connections(admin: Admin, logins: dict[str, str], report: Report) -> dict[str, int]:
    """The daemons' sessions now, against what each keeps (SESSIONS)."""
    rows = dict(
        admin.query(
            "SELECT usename, count(*) FROM pg_stat_activity WHERE usename = ANY(%s) GROUP BY 1",
            (list(logins.values()),),
        )
    )
    out = {}
    for name, login in logins.items():
        n = rows.get(login, 0)
        out[name] = n
        kind = "scheduler" if name in SCHEDULERS else "runner" if name in RUNNERS else None
        limit = SESSIONS[kind] if kind else 0
        if n > limit:
            report.problems.append(f"{login} has {n} sessions at the end, expected at most {limit}")
    return out


def _resources(slots: list[Slot], minutes: float, report: Report) -> None:
    """Each incarnation sampled over a quarter of the run (from a minute to
    RESOURCE_SPAN): its descriptors and memory flat from its first sample to its last."""
    span = max(60.0, min(minutes * 15, RESOURCE_SPAN))
    checked = []
    for s in slots:
        for inc in s.incarnations:
            if len(inc.usage) < 2 or inc.usage[-1][0] - inc.usage[0][0] < span:
                continue
            (t1, fd1, rss1), (t2, fd2, rss2) = inc.usage[0], inc.usage[-1]
            what = f"{s.name} over {t2 - t1:.0f} s: fds {fd1} -> {fd2}, RSS {rss1 // 1024} -> {rss2 // 1024} MiB"
            checked.append(what)
            if fd2 - fd1 > FD_GROWTH or rss2 - rss1 > RSS_GROWTH_KIB:
                report.problems.append(f"{what}: grew more than {FD_GROWTH} fds or {RSS_GROWTH_KIB // 1024} MiB")
    report.figures["resources"] = checked or "no incarnation lived long enough to be measured"


def _retry_pass(admin: Admin) -> datetime:
    """Once the runners stopped and the runs they held are ended: a heartbeat after
    which a whole pass (reap, retries, tick) ran."""
    wait_for(
        lambda: admin.query("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'RUNNING'")[0][0] == 0,
        timeout=60,
        interval=0.5,
        what="no run left RUNNING",
    )
    now = admin.query("SELECT now()")[0][0]

    def beat_after(t: datetime) -> datetime | None:
        beat = admin.query("SELECT heartbeat_at FROM scrinalia.scheduler_state")[0][0]
        return beat if beat is not None and beat > t else None

    first = wait_for(lambda: beat_after(now), timeout=30, what="a scheduler pass")
    wait_for(lambda: beat_after(first), timeout=30, what="that pass done")
    return first


def print_report(r: Report) -> None:
    say(r.summary())
    for name, restarts in r.restarts.items():
        say(f"  {name} restarted: " + (", ".join(f"{k} x{v}" for k, v in restarts.items()) or "never"))
    for k, v in r.invariants.items():
        say(f"  {k}: {v}")
    for k, v in r.figures.items():
        say(f"  {k}: {v}")
    if r.problems:
        say(f"SOAK FAILED (seed {r.seed}): {len(r.problems)} problems")
        for p in r.problems[:50]:
            say(f"  {p}")
        say(f"replay: SOAK_SEED={r.seed} make soak MINUTES={r.minutes:g}")
    else:
        say(f"soak passed (seed {r.seed})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "60")))
    p.add_argument("--workdir", type=Path, help="where the daemons' logs go (default: a new temporary directory)")
    args = p.parse_args(argv)
    seed = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(1, 2**31))
    try:
        report = run(args.minutes, seed, args.workdir)
    except BaseException:
        say(f"SOAK FAILED (seed {seed}): the soak itself broke; replay: SOAK_SEED={seed}")
        raise
    print_report(report)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
