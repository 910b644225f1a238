"""The cron language and its next occurrence in a zone (pure Python, no database).

The DST expectations below are worked out by hand from the zones' rules; the
brute-force reference at the end walks UTC minutes one by one and applies the
rules of docs/cron.md in their own formulation, independently of cron.py.
"""

from __future__ import annotations

import random
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrinalia_workers.cron import (
    CronError,
    ZoneError,
    next_occurrence,
    next_occurrences,
    validate,
    validate_timezone,
)

UTC = UTC


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- the language -------------------------------------------------------------

VALID = [
    ("* * * * *", "* * * * *"),
    ("0 0 * * *", "0 0 * * *"),
    ("  0\t0  *   * *\t", "0 0 * * *"),
    ("05 09 * * *", "05 09 * * *"),
    ("59 23 31 12 7", "59 23 31 12 7"),
    ("0 0 1 1 0", "0 0 1 1 0"),
    ("*/15 * * * *", "*/15 * * * *"),
    ("*/60 */24 */31 */12 */8", "*/60 */24 */31 */12 */8"),
    ("*/1 */1 */1 */1 */1", "*/1 */1 */1 */1 */1"),
    ("0-59/5 0-23/2 1-31/3 1-12/4 0-7/2", "0-59/5 0-23/2 1-31/3 1-12/4 0-7/2"),
    ("1,2,3 4,5 6,7 8,9 1,2", "1,2,3 4,5 6,7 8,9 1,2"),
    ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
    ("0 9 * * mon-fri", "0 9 * * mon-fri"),
    ("0 9 * JAN-MAR *", "0 9 * JAN-MAR *"),
    ("0 9 * jan,Jul,DEC *", "0 9 * jan,Jul,DEC *"),
    ("0 9 * * SUN,SAT", "0 9 * * SUN,SAT"),
    ("0 9 * * SUN-SAT", "0 9 * * SUN-SAT"),
    ("0 9 * * 5-7", "0 9 * * 5-7"),
    ("0 9 * * 0-7", "0 9 * * 0-7"),
    ("0 9 * * 7", "0 9 * * 7"),
    ("0 9 * FEB-FEB *", "0 9 * FEB-FEB *"),
    ("0 9 * 1-DEC *", "0 9 * 1-DEC *"),
    ("0 9 * * MON-5", "0 9 * * MON-5"),
    ("0 9 * JAN-MAR/2 *", "0 9 * JAN-MAR/2 *"),
    ("0 0 13 * FRI", "0 0 13 * FRI"),
    ("0 0 29 2 *", "0 0 29 2 *"),
    ("0 0 30,31 2,3 *", "0 0 30,31 2,3 *"),
    ("0 0 31 2 MON", "0 0 31 2 MON"),  # OR: fires on Mondays of February
    ("0 0 */2 2 *", "0 0 */2 2 *"),
    ("5,*/20 * * * *", "5,*/20 * * * *"),
    ("*,5 * * * *", "*,5 * * * *"),
    ("10-10 3-3 * * *", "10-10 3-3 * * *"),
    ("0 0 1-31 * *", "0 0 1-31 * *"),
    ("00 00 01 01 00", "00 00 01 01 00"),
    ("0 0 * * 1-1/1", "0 0 * * 1-1/1"),
    ("0 2 * * *", "0 2 * * *"),
    ("0 12 * * 3", "0 12 * * 3"),
    ("30 4 1,15 * 5", "30 4 1,15 * 5"),
]

INVALID = [
    # (expr, field); field None: the whole expression
    (None, None),
    ("", None),
    ("   \t ", None),
    ("* * * *", None),
    ("* * * * * *", None),
    ("0 * * * * * 2026", None),
    ("@daily", None),
    ("@reboot", None),
    ("@every 5m", None),
    ("0 0 * * *\n", 5),  # newline is not a separator: 5 fields, the last "*\n"
    ("* " * 101, None),  # longer than 200 characters
    ("60 * * * *", 1),
    ("-1 * * * *", 1),
    ("100 * * * *", 1),
    ("000 * * * *", 1),
    ("* 24 * * *", 2),
    ("0 24 * * *", 2),
    ("* * 0 * *", 3),
    ("* * 32 * *", 3),
    ("* * * 0 *", 4),
    ("* * * 13 *", 4),
    ("* * * * 8", 5),
    ("*/0 * * * *", 1),
    ("*/61 * * * *", 1),
    ("* */25 * * *", 2),
    ("* * */32 * *", 3),
    ("* * * */13 *", 4),
    ("* * * * */9", 5),
    ("*/x * * * *", 1),
    ("*/ * * * *", 1),
    ("*/100 * * * *", 1),
    ("5/10 * * * *", 1),
    ("* * * JAN/2 *", 4),
    ("10-5 * * * *", 1),
    ("* 23-1 * * *", 2),
    ("* * * DEC-JAN *", 4),
    ("* * * * SAT-SUN", 5),
    ("* * * * 7-0", 5),
    ("1,,2 * * * *", 1),
    (",1 * * * *", 1),
    ("1, * * * *", 1),
    ("* 1, * * *", 2),
    ("* * L * *", 3),
    ("* * 15W * *", 3),
    ("* * LW * *", 3),
    ("* * * * 5L", 5),
    ("* * * * 5#3", 5),
    ("* * ? * *", 3),
    ("* * * * ?", 5),
    ("H * * * *", 1),
    ("H/5 * * * *", 1),
    ("H(0-29) * * * *", 1),
    ("MON * * * *", 1),
    ("* JAN * * *", 2),
    ("* * MON * *", 3),
    ("* * * MON *", 4),
    ("* * * * JAN", 5),
    ("* * * JANUARY *", 4),
    ("* * * * MONDAY", 5),
    ("* * * * MO", 5),
    ("* * * JA *", 4),
    ("* * * FOO *", 4),
    ("* * * * FOO", 5),
    ("** * * * *", 1),
    ("*-5 * * * *", 1),
    ("1-* * * * *", 1),
    ("1-2-3 * * * *", 1),
    ("1/2/3 * * * *", 1),
    ("1-5/0 * * * *", 1),
    ("1-5/61 * * * *", 1),
    ("+1 * * * *", 1),
    ("1.5 * * * *", 1),
    ("٣ * * * *", 1),  # a non-ASCII digit
    ("１ * * * *", 1),  # fullwidth digit
    ("* * * * ſun", 5),  # a letter that upper-cases to ASCII
    ("0 0 * * *\u00a0", 5),  # no-break space is not a separator
    ("0 0 30 2 *", 3),  # never fires
    ("0 0 31 4,6,9,11 *", 3),
    ("0 0 30,31 FEB *", 3),
    ("0 0 31 2 */2", 3),
    ("0 0 31 2 *,MON", 3),  # day-of-week starts with '*': AND
    ("0 24 31 2 *", 2),  # the first bad field is blamed
    ("60 24 * * *", 1),
    ("* * * * * *", None),
]


@pytest.mark.parametrize("expr, normalised", VALID)
def test_valid(expr, normalised):
    assert validate(expr) == normalised
    assert validate(normalised) == normalised


@pytest.mark.parametrize("expr, field", INVALID)
def test_invalid(expr, field):
    with pytest.raises(CronError) as ei:
        validate(expr)
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.field == field, str(e)
    if field is None:
        assert e.field_name is None
        assert not re.search(r"field \d \(", str(e))
    else:
        name = ("minute", "hour", "day-of-month", "month", "day-of-week")[field - 1]
        assert e.field_name == name
        assert f"field {field} ({name}):" in str(e)


def test_error_message_style():
    with pytest.raises(CronError) as ei:
        validate("0 24 * * *")
    assert str(ei.value) == 'invalid cron "0 24 * * *": field 2 (hour): 24 is out of range 0-23'
    assert ei.value.sqlstate == "SW003"


def test_length_limit_counts_the_raw_text():
    assert validate("0 0 * * *" + " " * 191) == "0 0 * * *"  # exactly 200
    with pytest.raises(CronError):
        validate("0 0 * * *" + " " * 192)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789*/-,JANMONFRIjanl?#@ \t", max_size=30))
def test_validate_total_and_idempotent(text):
    try:
        norm = validate(text)
    except CronError as e:
        assert e.field in (None, 1, 2, 3, 4, 5)
        return
    assert validate(norm) == norm
    assert len(norm.split(" ")) == 5


# --- zones --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "UTC",
        "Europe/Berlin",
        "America/Sao_Paulo",
        "Asia/Kathmandu",
        "Pacific/Chatham",
        "Australia/Lord_Howe",
        "Etc/GMT+3",
    ],
)
def test_valid_zones(name):
    assert validate_timezone(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "localtime",
        "posixrules",
        "Factory",
        "posix/Europe/Berlin",
        "right/UTC",
        "/etc/localtime",
        "/usr/share/zoneinfo/UTC",
        "../etc/passwd",
        "Europe/../UTC",
        "Europe/Nowhere",
        "europe/berlin",
        "Europe\\Berlin",
        "CEST",
        "+01:00",
        None,
        5,
    ],
)
def test_invalid_zones(name):
    with pytest.raises(ZoneError) as ei:
        validate_timezone(name)
    assert isinstance(ei.value, ValueError)
    with pytest.raises(ZoneError):
        next_occurrence("* * * * *", name, utc(2026, 1, 1))


def test_naive_after_is_refused():
    with pytest.raises(ValueError):
        next_occurrence("* * * * *", "UTC", datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        next_occurrences([("* * * * *", "UTC")], datetime(2026, 1, 1))


def test_bad_expression_is_a_cron_error():
    with pytest.raises(CronError):
        next_occurrence("0 0 L * *", "UTC", utc(2026, 1, 1))


# --- occurrences, worked out by hand -------------------------------------------


def chain(expr: str, tz: str, after: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        after = next_occurrence(expr, tz, after)
        assert after.tzinfo is UTC
        out.append(after)
    return out


HAND = [
    # Europe/Berlin 2026: CET->CEST at 2026-03-29 01:00 UTC (02:00 -> 03:00),
    # CEST->CET at 2026-10-25 01:00 UTC (03:00 -> 02:00, 02:xx twice).
    ("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]),
    (
        "0,15,30,45 2 * * *",
        "Europe/Berlin",
        utc(2026, 3, 29, 0),
        [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0), utc(2026, 3, 30, 0, 15)],
    ),
    (
        "0,30 2,3 * * *",
        "Europe/Berlin",
        utc(2026, 3, 29, 0),  # gap end 03:00 also matches: once
        [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30)],
    ),
    ("0 3 * * *", "Europe/Berlin", utc(2026, 3, 29, 0), [utc(2026, 3, 29, 1), utc(2026, 3, 30, 1)]),
    (
        "*/15 * * * *",
        "Europe/Berlin",
        utc(2026, 3, 29, 0, 30),
        [utc(2026, 3, 29, 0, 45), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 15)],
    ),
    ("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
    (
        "*/15 * * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 23, 50),
        [utc(2026, 10, 25, 0, 0) + timedelta(minutes=15 * i) for i in range(10)],
    ),
    (
        "10 * * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 23, 50),
        [utc(2026, 10, 25, 0, 10), utc(2026, 10, 25, 1, 10), utc(2026, 10, 25, 2, 10)],
    ),
    (
        "0 */2 * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 23, 30),  # */2 is a fixed hour
        [utc(2026, 10, 25, 0), utc(2026, 10, 25, 3)],
    ),
    ("* 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 58), [utc(2026, 10, 25, 0, 59), utc(2026, 10, 26, 1)]),
    # from inside the second pass, a fixed hour waits for the next day
    ("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 1, 10), [utc(2026, 10, 26, 1, 30)]),
    # from the first pass, a '*' hour still sees the second pass of an earlier minute
    ("10 * * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 40), [utc(2026, 10, 25, 1, 10)]),
    # America/New_York 2026: EST->EDT 2026-03-08 07:00 UTC, EDT->EST 2026-11-01 06:00 UTC.
    ("30 2 * * *", "America/New_York", utc(2026, 3, 7, 12), [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]),
    ("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
    (
        "*/30 * * * *",
        "America/New_York",
        utc(2026, 11, 1, 5),
        [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6), utc(2026, 11, 1, 6, 30), utc(2026, 11, 1, 7)],
    ),
    (
        "0 9 * * MON-FRI",
        "America/New_York",
        utc(2026, 3, 6, 15),  # Fri after 09:00 EST -> Mon 09:00 EDT
        [utc(2026, 3, 9, 13)],
    ),
    # America/Sao_Paulo: 2018-11-04 00:00 -03 -> 01:00 -02 (at 03:00 UTC);
    # 2018-02-18 00:00 -02 -> 2018-02-17 23:00 -03 (at 02:00 UTC).
    ("0 0 * * *", "America/Sao_Paulo", utc(2018, 11, 3, 12), [utc(2018, 11, 4, 3), utc(2018, 11, 5, 2)]),
    ("30 0 * * *", "America/Sao_Paulo", utc(2018, 11, 3, 12), [utc(2018, 11, 4, 3), utc(2018, 11, 5, 2, 30)]),
    ("0,30 0,1 * * *", "America/Sao_Paulo", utc(2018, 11, 4, 2, 50), [utc(2018, 11, 4, 3), utc(2018, 11, 4, 3, 30)]),
    ("30 23 * * *", "America/Sao_Paulo", utc(2018, 2, 17, 12), [utc(2018, 2, 18, 1, 30), utc(2018, 2, 19, 2, 30)]),
    ("0 0 * * *", "America/Sao_Paulo", utc(2018, 2, 17, 12), [utc(2018, 2, 18, 3)]),
    (
        "*/30 * * * *",
        "America/Sao_Paulo",
        utc(2018, 2, 18, 1),
        [utc(2018, 2, 18, 1, 30), utc(2018, 2, 18, 2), utc(2018, 2, 18, 2, 30), utc(2018, 2, 18, 3)],
    ),
    # America/Havana 2026: 00:00 CST -> 01:00 CDT on 03-08 (05:00 UTC);
    # 01:00 CDT -> 00:00 CST on 11-01 (05:00 UTC), 00:xx twice.
    ("0 0 * * *", "America/Havana", utc(2026, 3, 7, 12), [utc(2026, 3, 8, 5), utc(2026, 3, 9, 4)]),
    ("30 0 * * *", "America/Havana", utc(2026, 10, 31, 12), [utc(2026, 11, 1, 4, 30), utc(2026, 11, 2, 5, 30)]),
    (
        "*/20 * * * *",
        "America/Havana",
        utc(2026, 11, 1, 3, 50),
        [utc(2026, 11, 1, 4) + timedelta(minutes=20 * i) for i in range(6)],
    ),
    # Australia/Lord_Howe 2026: +10:30 -> +11 at 02:00 on 10-04 (2026-10-03 15:30 UTC);
    # +11 -> +10:30 at 02:00 on 04-05 (2026-04-04 15:00 UTC), 01:30-01:59 twice.
    ("15 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3), [utc(2026, 10, 3, 15, 30), utc(2026, 10, 4, 15, 15)]),
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        utc(2026, 10, 3, 15),
        [utc(2026, 10, 3, 15, 15), utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 15, 45)],
    ),
    ("45 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4), [utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)]),
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        utc(2026, 4, 4, 14, 20),
        [
            utc(2026, 4, 4, 14, 30),
            utc(2026, 4, 4, 14, 45),
            utc(2026, 4, 4, 15),
            utc(2026, 4, 4, 15, 15),
            utc(2026, 4, 4, 15, 30),
        ],
    ),
    # Pacific/Chatham 2026: +12:45 -> +13:45 at 02:45 on 09-27 (09-26 14:00 UTC);
    # +13:45 -> +12:45 at 03:45 on 04-05 (04-04 14:00 UTC).
    ("0 3 * * *", "Pacific/Chatham", utc(2026, 9, 26), [utc(2026, 9, 26, 14), utc(2026, 9, 27, 13, 15)]),
    ("0 3 * * *", "Pacific/Chatham", utc(2026, 4, 4), [utc(2026, 4, 4, 13, 15), utc(2026, 4, 5, 14, 15)]),
    ("0 0 * * *", "Pacific/Chatham", utc(2025, 12, 31), [utc(2025, 12, 31, 10, 15)]),
    # Asia/Kathmandu +05:45, no DST
    ("0 0 * * *", "Asia/Kathmandu", utc(2026, 1, 1), [utc(2026, 1, 1, 18, 15), utc(2026, 1, 2, 18, 15)]),
    ("30 9 * * 1-5", "Asia/Kathmandu", utc(2026, 1, 2, 4), [utc(2026, 1, 5, 3, 45)]),  # Fri 09:45 -> Mon
    # Australia/Sydney 2026: +11 -> +10 at 03:00 on 04-05 (04-04 16:00 UTC);
    # +10 -> +11 at 02:00 on 10-04 (10-03 16:00 UTC).
    ("30 2 * * *", "Australia/Sydney", utc(2026, 10, 3), [utc(2026, 10, 3, 16), utc(2026, 10, 4, 15, 30)]),
    ("30 2 * * *", "Australia/Sydney", utc(2026, 4, 4), [utc(2026, 4, 4, 15, 30), utc(2026, 4, 5, 16, 30)]),
    # UTC: leap days, day-of-month/day-of-week
    ("0 0 29 2 *", "UTC", utc(2025, 1, 1), [utc(2028, 2, 29), utc(2032, 2, 29)]),
    ("0 0 29 2 */7", "UTC", utc(2025, 1, 1), [utc(2032, 2, 29), utc(2060, 2, 29)]),  # Feb 29 AND Sunday
    (
        "0 0 13 * FRI",
        "UTC",
        utc(2026, 1, 1),  # OR: Fridays and the 13th
        [utc(2026, 1, 2), utc(2026, 1, 9), utc(2026, 1, 13), utc(2026, 1, 16)],
    ),
    ("0 0 * * FRI", "UTC", utc(2026, 1, 1), [utc(2026, 1, 2), utc(2026, 1, 9)]),
    (
        "0 0 */2 * MON",
        "UTC",
        utc(2026, 1, 1),  # AND: '*/2' starts with '*'
        [utc(2026, 1, 5), utc(2026, 1, 19), utc(2026, 2, 9)],
    ),
    ("0 0 1 * */1", "UTC", utc(2026, 1, 1), [utc(2026, 2, 1), utc(2026, 3, 1)]),
    ("0 0 1-31 * MON", "UTC", utc(2026, 1, 1), [utc(2026, 1, 2), utc(2026, 1, 3)]),  # OR: every day
    ("0 0 31 2 MON", "UTC", utc(2026, 1, 1), [utc(2026, 2, 2), utc(2026, 2, 9)]),
    ("0 12 * * 7", "UTC", utc(2026, 1, 1), [utc(2026, 1, 4, 12)]),
    ("59 23 31 12 *", "UTC", utc(2026, 12, 31, 23, 59), [utc(2027, 12, 31, 23, 59)]),
    ("* * * * *", "UTC", utc(2026, 1, 1, 0, 0, 30), [utc(2026, 1, 1, 0, 1)]),
]


@pytest.mark.parametrize("expr, tz, after, expected", HAND)
def test_hand_worked(expr, tz, after, expected):
    assert chain(expr, tz, after, len(expected)) == expected


def test_after_in_another_zone_and_zoneinfo_object():
    after = datetime(2026, 3, 29, 3, 0, tzinfo=ZoneInfo("Europe/Berlin")) - timedelta(minutes=1)
    assert next_occurrence("30 2 * * *", ZoneInfo("Europe/Berlin"), after) == utc(2026, 3, 30, 0, 30)
    assert next_occurrence("0 0 * * *", "UTC", datetime(2026, 1, 1, 23, tzinfo=timezone(timedelta(hours=-3)))) == utc(
        2026, 1, 3
    )


def test_next_occurrences_matches_single_calls_and_is_fast():
    pairs = [(e, tz) for e, tz, _, _ in HAND]
    after = utc(2026, 3, 28, 12)
    items = [pairs[i % len(pairs)] for i in range(100_000)]
    t0 = time.perf_counter()
    got = next_occurrences(items, after)
    elapsed = time.perf_counter() - t0
    assert got[: len(pairs)] == [next_occurrence(e, tz, after) for e, tz in pairs]
    assert len(got) == 100_000
    assert elapsed < 2.0, f"{elapsed / 100_000 * 1e6:.1f} us per schedule"


# --- brute-force reference ------------------------------------------------------

LOW, HIGH = (0, 0, 1, 1, 0), (59, 23, 31, 12, 7)
MONTHS = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
DAYS = "SUN MON TUE WED THU FRI SAT".split()
HOT_HOURS = (0, 1, 2, 3, 23)  # where transitions happen


def gen_item(rng: random.Random, f: int) -> tuple[str, set[int]]:
    lo, hi = LOW[f], HIGH[f]

    def num() -> int:
        if f == 1 and rng.random() < 0.6:
            return rng.choice(HOT_HOURS)
        return rng.randint(lo, hi)

    def name(v: int) -> str:
        if f == 3 and rng.random() < 0.3:
            return rng.choice([str.upper, str.lower, str.title])(MONTHS[v - 1])
        if f == 4 and v < 7 and rng.random() < 0.3:
            return rng.choice([str.upper, str.lower, str.title])(DAYS[v])
        return ("0" if v < 10 and rng.random() < 0.1 else "") + str(v)

    kind = rng.random()
    if kind < 0.3:
        s = rng.randint(1, hi - lo + 1) if f != 0 else rng.choice([1, 5, 7, 10, 15, 20, 30, 45, 60])
        return f"*/{s}", set(range(lo, hi + 1, s))
    if kind < 0.6:
        v = num()
        return name(v), {v}
    a, b = sorted((num(), num()))
    if rng.random() < 0.5:
        return f"{name(a)}-{name(b)}", set(range(a, b + 1))
    s = rng.randint(1, hi - lo + 1)
    return f"{name(a)}-{name(b)}/{s}", set(range(a, b + 1, s))


def gen_field(rng: random.Random, f: int) -> tuple[str, set[int]]:
    # mostly '*' for the day fields, so that most expressions fire within the window
    if rng.random() < (0.25 if f < 2 else 0.7):
        return "*", set(range(LOW[f], HIGH[f] + 1))
    texts, values = [], set()
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        t, v = gen_item(rng, f)
        texts.append(t)
        values |= v
    return ",".join(texts), values


class Reference:
    """The rules of docs/cron.md, walking UTC minutes."""

    def __init__(self, fields: list[str], sets: list[set[int]]):
        self.fields, self.sets = fields, sets
        self.dows = {d % 7 for d in sets[4]}
        self.day_and = fields[2].startswith("*") or fields[4].startswith("*")

    def matches(self, w: datetime) -> bool:
        mi, ho, dom, mo, _ = self.sets
        if w.minute not in mi or w.hour not in ho or w.month not in mo:
            return False
        a, b = w.day in dom, (w.weekday() + 1) % 7 in self.dows
        return (a and b) if self.day_and else (a or b)

    def fires_at(self, t: datetime, zone: ZoneInfo) -> bool:
        wall = t.astimezone(zone)
        prev = (t - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None)
        naive = wall.replace(tzinfo=None)
        if self.matches(naive) and (wall.fold == 0 or self.fields[1] == "*"):
            return True
        # spring-forward: wall minutes skipped between the previous minute and this one
        w = prev + timedelta(minutes=1)
        while w < naive:
            if self.matches(w):
                return True
            w += timedelta(minutes=1)
        return False

    def next(self, zone: ZoneInfo, after: datetime, limit: timedelta) -> datetime | None:
        t = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        end = after + limit
        while t <= end:
            if self.fires_at(t, zone):
                return t
            t += timedelta(minutes=1)
        return None


ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "America/Sao_Paulo",
    "America/Havana",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "Australia/Sydney",
    "UTC",
]


def transitions(zone: ZoneInfo, years: range) -> list[datetime]:
    """The UTC instants at which the zone's offset changes."""
    out = []
    t = datetime(years.start, 1, 1, tzinfo=UTC)
    end = datetime(years.stop, 1, 1, tzinfo=UTC)
    step = timedelta(minutes=30)
    while t < end:
        if t.astimezone(zone).utcoffset() != (t + step).astimezone(zone).utcoffset():
            lo, hi = t, t + step
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == lo.astimezone(zone).utcoffset():
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
        t += step
    return out


def test_reference_sees_the_rules():
    """The reference itself must encode the rules, or the comparison proves nothing."""
    ref = Reference(["30", "2", "*", "*", "*"], [{30}, {2}, set(range(1, 32)), set(range(1, 13)), set(range(8))])
    berlin = ZoneInfo("Europe/Berlin")
    assert ref.next(berlin, utc(2026, 3, 29), timedelta(days=1)) == utc(2026, 3, 29, 1)
    assert ref.next(berlin, utc(2026, 10, 25, 0, 30), timedelta(days=2)) == utc(2026, 10, 26, 1, 30)
    star = Reference(
        ["*/15", "*", "*", "*", "*"],
        [set(range(0, 60, 15)), set(range(24)), set(range(1, 32)), set(range(1, 13)), set(range(8))],
    )
    assert star.next(berlin, utc(2026, 10, 25, 0, 50), timedelta(days=1)) == utc(2026, 10, 25, 1)


@pytest.mark.parametrize("zone_name", ZONES)
def test_against_brute_force(zone_name):
    rng = random.Random(f"cron-{zone_name}")
    zone = ZoneInfo(zone_name)
    years = range(2017, 2028) if zone_name == "America/Sao_Paulo" else range(2024, 2028)
    points = transitions(zone, years) or [utc(2026, 1, 1) + timedelta(days=37 * i) for i in range(10)]
    limit = timedelta(hours=36)
    checked = fired = 0
    for _ in range(60):
        sets, fields = [], []
        for f in range(5):
            text, values = gen_field(rng, f)
            fields.append(text)
            sets.append(values)
        expr = " ".join(fields)
        try:
            validate(expr)
        except CronError:
            continue  # e.g. a day-of-month that never exists in the months
        ref = Reference(fields, sets)
        after = rng.choice(points) + timedelta(seconds=rng.randint(-6 * 3600, 3 * 3600))
        if rng.random() < 0.5:
            after = after.replace(second=0)
        for _ in range(3):  # a few consecutive occurrences, crossing the transition
            expected = ref.next(zone, after, limit)
            got = next_occurrence(expr, zone_name, after)
            checked += 1
            if expected is None:
                assert got > after + limit, (expr, zone_name, after, got)
                break
            fired += 1
            assert got == expected, (expr, zone_name, after)
            after = got
    assert checked >= 60 and fired >= 30
