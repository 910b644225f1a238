"""A large install, a page at a time: `worker list` pages the catalogue by name (--limit,
--after, --all), and `status` prints the agenda's totals and its first workers, what
needs an operator first, with how many more there are and how to see them."""

from __future__ import annotations

import json
import re

import pytest

from helpers import assert_one_line_error, cli, make_workers, put_schedule, set_next_run, tick
from scrinalia_workers.cli import watch
from scrinalia_workers.cli.commands.worker import PAGE_SIZE
from scrinalia_workers.presentation.agenda import AGENDA_SHOWN

NEXT_PAGE = re.compile(r"the next page: scrinalia-workers worker list --after (\S+) --limit 3")


def _listed(out: str) -> list[str]:
    """The worker names of a `worker list` table."""
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith("w0")]


def test_worker_list_pages_by_name_with_the_count_and_the_next_page(db_dsn, db):
    names = make_workers(db, 8)
    first = cli("worker", "list", "--limit", "3", dsn=db_dsn)
    assert first.code == 0, first.err
    assert _listed(first.out) == names[:3]
    footer = first.out.splitlines()[-1]
    assert footer.startswith("workers 1-3 of 8, by name; the next page: ")
    assert "every one: scrinalia-workers worker list --all" in footer

    # following the hint: every worker once, in order, no overlap and no gap
    seen, out = [], first.out
    for _ in range(5):
        seen += _listed(out)
        m = NEXT_PAGE.search(out)
        if m is None:
            break
        out = cli("worker", "list", "--limit", "3", "--after", m.group(1), dsn=db_dsn).out
    assert seen == names
    assert out.splitlines()[-1].startswith("workers 7-8 of 8, by name; every one")  # the last page: no next

    # --json: the page's rows; a page shorter than --limit is the last
    page = json.loads(cli("--json", "worker", "list", "--limit", "3", "--after", names[2], dsn=db_dsn).out)
    assert [r["worker_name"] for r in page] == names[3:6]
    assert [r["worker_name"] for r in json.loads(cli("--json", "worker", "list", "--all", dsn=db_dsn).out)] == names
    assert _listed(cli("worker", "list", "--all", dsn=db_dsn).out) == names


def test_worker_list_pages_by_default_and_after_any_name(db_dsn, db):
    names = make_workers(db, PAGE_SIZE + 5)
    r = cli("worker", "list", dsn=db_dsn)
    assert _listed(r.out) == names[:PAGE_SIZE]
    assert r.out.splitlines()[-1].startswith(
        f"workers 1-{PAGE_SIZE} of {PAGE_SIZE + 5}, by name; the next page: "
        f"scrinalia-workers worker list --after {names[PAGE_SIZE - 1]};"
    )
    assert len(json.loads(cli("--json", "worker", "list", dsn=db_dsn).out)) == PAGE_SIZE
    # keyset: a name that is not a worker's starts the page after it
    assert _listed(cli("worker", "list", "--after", names[-3] + "x", dsn=db_dsn).out) == names[-2:]
    beyond = cli("worker", "list", "--after", "zzz", dsn=db_dsn)
    assert beyond.code == 0 and beyond.out.splitlines()[-1].startswith("no workers after that name: 105 in all")
    assert json.loads(cli("--json", "worker", "list", "--after", "zzz", dsn=db_dsn).out) == []


def test_a_catalogue_that_fits_the_page_says_nothing_more(db_dsn, db):
    make_workers(db, 2)
    r = cli("worker", "list", dsn=db_dsn)
    assert r.code == 0 and "next page" not in r.out and "of 2" not in r.out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["worker", "list", "--limit", "0"], "out of range 1..10000"),
        (["worker", "list", "--limit", "100000000"], "out of range 1..10000"),
        (["worker", "list", "--limit", "ten"], "is not a whole number"),
        (["worker", "list", "--all", "--limit", "5"], "--all lists every worker"),
        (["worker", "list", "--all", "--after", "w1"], "--all lists every worker"),
        (["status", "--limit", "0"], "out of range 1..10000"),
        (["status", "--limit", "100000000"], "out of range 1..10000"),
        (["status", "--all", "--limit", "5"], "--all prints every worker"),
        (["status", "--all", "--watch"], "--all prints every worker"),
    ],
)
def test_a_bad_page_is_one_line(db_dsn, args, fragment):
    assert_one_line_error(cli(*args, dsn=db_dsn), 2, fragment)


@pytest.fixture
def install(db):
    """w00000..w00011 unscheduled, but w00009 overdue and w00010 next due."""
    names = make_workers(db, 12)
    for w in ("w00009", "w00010"):
        put_schedule(db, w, "0 2 * * *", "UTC")
    tick(db)  # arm them
    set_next_run(db, "w00009", "1 hour")
    db.execute("SELECT scrinalia.add_units('w00011', ARRAY['a', 'b'])")
    return names


def test_status_prints_the_first_workers_the_totals_and_how_to_see_more(db_dsn, install):
    r = cli("status", "--limit", "3", dsn=db_dsn)
    assert r.code == 0, r.err
    agenda, counters = r.out.split("queue counters")
    totals = next(ln for ln in agenda.splitlines() if ln.startswith("agenda: "))
    assert totals.startswith("agenda: 12 workers, 2 scheduled (0 paused, 0 awaiting arm); runs: 0 running, 0 queued")
    assert totals.endswith("needs an operator: 1 overdue")
    assert "agenda (when each worker runs: the first 3 of 12, what needs an operator first)" in agenda
    rows = [ln for ln in agenda.splitlines() if ln.startswith("w0")]
    # the overdue first, then the next due, then the rest by name; each with its concern
    assert [ln.split()[0] for ln in rows] == ["w00009", "w00010", "w00000"]
    assert [ln.split()[-1] for ln in rows] == ["overdue", "next", "other"]
    assert "and 9 more: scrinalia-workers status --all (every worker, by name)" in agenda
    assert "the 3 busiest of 12 workers; 1 worker(s) with units, 2 pending, 0 processed" in counters
    assert [ln.split() for ln in counters.splitlines() if ln.startswith("w0")][0] == ["w00011", "2", "0"]
    assert "and 9 more: scrinalia-workers status --all" in counters

    data = json.loads(cli("status", "--json", "--limit", "3", dsn=db_dsn).out)
    assert [(a["worker_name"], a["focus"]) for a in data["agenda"]] == [
        ("w00009", "overdue"),
        ("w00010", "next"),
        ("w00000", "other"),
    ]
    assert (data["agenda_more"], data["agenda_totals"]["workers"], data["agenda_totals"]["overdue"]) == (9, 12, 1)
    assert len(data["queue_counters"]) == 3 and data["queue_counters_more"] == 9
    assert data["queue_totals"] == {"workers_with_units": 1, "pending": 2, "processed": 0}


def test_status_all_prints_every_worker_by_name(db_dsn, install):
    r = cli("status", "--all", dsn=db_dsn)
    assert r.code == 0, r.err
    agenda, counters = r.out.split("queue counters")
    assert [ln.split()[0] for ln in agenda.splitlines() if ln.startswith("w0")] == install
    assert "more:" not in r.out and "concern" not in agenda
    assert len([ln for ln in counters.splitlines() if ln.startswith("w0")]) == 12
    data = json.loads(cli("status", "--json", "--all", dsn=db_dsn).out)
    assert [a["worker_name"] for a in data["agenda"]] == install and data["agenda_more"] == 0


def test_status_by_default_shows_its_page_of_a_larger_install(db_dsn, db):
    make_workers(db, AGENDA_SHOWN + 2)
    out = cli("status", dsn=db_dsn).out
    assert len([ln for ln in out.split("queue counters")[0].splitlines() if ln.startswith("w0")]) == AGENDA_SHOWN
    assert "and 2 more: " in out


def test_the_watch_screen_shows_its_first_workers_and_how_many_more(install, connect_as):
    screen = watch.render(connect_as("reader"), width=120, agenda_rows=2)
    agenda = screen.split("AGENDA", 1)[1].split("ACTIVE RUNS", 1)[0]
    assert "12 workers, 2 scheduled" in agenda and "1 overdue" in agenda
    assert [ln.split()[0] for ln in agenda.splitlines()[2:4]] == ["w00009", "w00010"]
    assert "and 10 more: scrinalia-workers status --all" in agenda
