"""Strict five-field cron expressions and their next occurrence in a time zone.

The language (see docs/cron.md) is validated here and, identically, by the SQL
function scrinalia.validate_cron (sql/20_cron.sql); tests/cron/test_cron_sql_agreement.py
pins that the two accept the same expressions and blame the same field.

How occurrences are computed: croniter iterates the *wall-clock* candidates (naive
datetimes, so croniter does no time-zone arithmetic at all), fed with the expression
as this module parsed it (explicit value lists) and with the day-of-month/day-of-week
combination decided here. Every candidate croniter yields is checked against our own
field sets and skipped if it does not match. Corrections made to croniter:

- Vixie cron ANDs day-of-month and day-of-week when either field *starts with* ``*``
  (``*/2``, ``*/3,5``); croniter ORs them unless the field is exactly ``*``. We pass
  ``day_or`` explicitly.
- croniter accepts far more than our language (seconds, L, W, #, ?, H, macros,
  wrap-around ranges); croniter only ever sees expressions we produced.
- The DST rules are ours, applied to each wall-clock candidate: a wall time in a
  spring-forward gap fires once at the end of the gap (the first valid instant);
  a repeated wall time fires once, at its first pass, unless the hour field is
  exactly ``*``, in which case both passes fire (the schedule keeps its real-time
  rhythm). An hour field like ``*/2`` counts as a fixed hour.

Expressions that can never fire (``0 0 31 2 *``) are rejected at validation, so
the iteration always ends.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

from scrinalia_workers.errors import InvalidCron as CronError
from scrinalia_workers.errors import InvalidTimezone as ZoneError
from scrinalia_workers.policy import MAX_CRON_LENGTH, MAX_TIMEZONE_LENGTH

__all__ = [
    "CronError",
    "ZoneError",
    "validate",
    "validate_timezone",
    "next_occurrence",
    "next_occurrences",
    "try_next_occurrences",
    "MAX_LENGTH",
]

MAX_LENGTH = MAX_CRON_LENGTH

FIELD_NAMES = CronError.FIELD_NAMES
_LOW = (0, 0, 1, 1, 0)
_HIGH = (59, 23, 31, 12, 7)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Longest month for each month, February counted as 29 (leap years do come).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

# The same regular expressions as sql/20_cron.sql: [ \t] only, ASCII only.
_SPLIT = re.compile(r"[ \t]+")
_ITEM = re.compile(r"(?:(\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?")


@dataclass(frozen=True)
class _Cron:
    text: str  # normalised
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]  # 0-6, Sunday = 0
    day_and: bool  # Vixie: AND when either day field starts with '*'
    hour_star: bool  # hour field is exactly '*': keep real-time rhythm in a fold
    proto: croniter  # copied per call: croniter objects are stateful

    def matches(self, w: datetime) -> bool:
        if w.minute not in self.minutes or w.hour not in self.hours or w.month not in self.months:
            return False
        dom_ok = w.day in self.doms
        dow_ok = w.isoweekday() % 7 in self.dows
        return (dom_ok and dow_ok) if self.day_and else (dom_ok or dow_ok)


def _field_error(src: str, f: int, detail: str) -> CronError:
    return CronError(f'invalid cron "{src}": field {f + 1} ({FIELD_NAMES[f]}): {detail}', f + 1)


def _token(src: str, f: int, tok: str) -> int:
    if tok[0].isalpha():
        upper = tok.upper()
        if f == 3:
            if upper in _MONTHS:
                return _MONTHS.index(upper) + 1
            raise _field_error(src, f, f'"{tok}" is not a month name (JAN..DEC)')
        if f == 4:
            if upper in _DAYS:
                return _DAYS.index(upper)
            raise _field_error(src, f, f'"{tok}" is not a day name (SUN..SAT)')
        raise _field_error(src, f, f'"{tok}": names are allowed only in the month and day-of-week fields')
    v = int(tok)
    if not _LOW[f] <= v <= _HIGH[f]:
        raise _field_error(src, f, f"{v} is out of range {_LOW[f]}-{_HIGH[f]}")
    return v


def _parse_field(src: str, f: int, text: str) -> set[int]:
    values: set[int] = set()
    span = _HIGH[f] - _LOW[f] + 1
    for item in text.split(","):
        if item == "":
            raise _field_error(src, f, f'empty item in list "{text}"')
        m = _ITEM.fullmatch(item)
        if m is None:
            raise _field_error(
                src,
                f,
                f'"{item}" is not a valid item (expected *, */S, N, N-M or N-M/S; L, W, #, ? and H are not supported)',
            )
        star, start, end, step = m.groups()
        if step is not None and star is None and end is None:
            raise _field_error(src, f, f'"{item}": a step needs * or a range (write N-M/S)')
        if star:
            lo, hi = _LOW[f], _HIGH[f]
        else:
            lo = _token(src, f, start)
            hi = _token(src, f, end) if end is not None else lo
            if lo > hi:
                raise _field_error(src, f, f'"{item}": range start {lo} is after its end {hi}')
        s = 1
        if step is not None:
            s = int(step)
            if not 1 <= s <= span:
                raise _field_error(src, f, f'"{item}": step {s} is out of range 1-{span}')
        values.update(range(lo, hi + 1, s))
    return values


def _split(expr: object) -> tuple[str, list[str]]:
    if expr is None:
        raise CronError("invalid cron: expression is missing")
    if not isinstance(expr, str):
        raise CronError(f"invalid cron: expected a string, not {type(expr).__name__}")
    if len(expr) > MAX_LENGTH:
        raise CronError(f"invalid cron: expression is longer than {MAX_LENGTH} characters")
    src = expr.strip(" \t")
    if src == "":
        raise CronError("invalid cron: expression is empty")
    fields = _SPLIT.split(src)
    if len(fields) != 5:
        if src.startswith("@"):
            raise CronError(
                f'invalid cron "{src}": macros such as @daily are not supported; write the five fields (e.g. 0 0 * * *)'
            )
        raise CronError(
            f'invalid cron "{src}": expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}'
        )
    return src, fields


@functools.lru_cache(maxsize=8192)
def _parse(expr: str) -> _Cron:
    src, fields = _split(expr)
    sets = [_parse_field(src, f, text) for f, text in enumerate(fields)]
    dows = {d % 7 for d in sets[4]}
    dom_star, dow_star = fields[2].startswith("*"), fields[4].startswith("*")
    day_and = dom_star or dow_star
    # In AND mode the day-of-month alone decides whether any date can match.
    if not dom_star and dow_star and min(sets[2]) > max(_MONTH_DAYS[m - 1] for m in sets[3]):
        raise _field_error(src, 2, "no selected day exists in the selected months, so it would never fire")
    # croniter gets explicit lists (and '*' only where the field is exactly '*').
    canon = [
        "*" if text == "*" else ",".join(map(str, sorted(s)))
        for text, s in zip(fields, [sets[0], sets[1], sets[2], sets[3], dows])
    ]
    proto = croniter(
        " ".join(canon),
        datetime(2000, 1, 1),
        ret_type=datetime,
        day_or=not day_and,
        max_years_between_matches=400,
    )
    return _Cron(
        " ".join(fields),
        frozenset(sets[0]),
        frozenset(sets[1]),
        frozenset(sets[2]),
        frozenset(sets[3]),
        frozenset(dows),
        day_and,
        fields[1] == "*",
        proto,
    )


def validate(expr: str) -> str:
    """Return the normalised expression (whitespace collapsed) or raise CronError."""
    return _parse(expr).text


# --- time zones ---------------------------------------------------------------

_EXCLUDED_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def validate_timezone(name: str) -> str:
    """Return `name` if it is an IANA zone name zoneinfo loads, else raise ZoneError."""
    _zone(name)
    return name


@functools.lru_cache(maxsize=1024)
def _zone_cached(name: str) -> ZoneInfo:
    bad = (
        name == ""
        or len(name) > MAX_TIMEZONE_LENGTH
        or name in _EXCLUDED_ZONES
        or name.startswith(("posix/", "right/", "/"))
        or ".." in name.split("/")
        or "\\" in name
        or name not in _zone_names()
    )
    if not bad:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise ZoneError(f"invalid time zone {name!r}: not an IANA zone name")


def _zone(tz: str | ZoneInfo) -> ZoneInfo:
    if isinstance(tz, ZoneInfo):
        return tz
    if not isinstance(tz, str):
        raise ZoneError(f"invalid time zone {tz!r}: expected a zone name")
    return _zone_cached(tz)


# --- occurrences --------------------------------------------------------------

_UTC = UTC
_MINUTE = timedelta(minutes=1)
# Wider than any real DST shift: how far ahead to look for a fold that could
# make an earlier wall time fire after `after` (its second pass).
_FOLD_LOOKAHEAD = timedelta(hours=3)


def _gap_end(w: datetime, zone: ZoneInfo) -> datetime:
    """The first valid instant (UTC) after the spring-forward gap containing wall time `w`."""
    # zoneinfo maps a gap time with the offset in force before the gap for fold=0
    # (an instant after the transition) and after it for fold=1 (an instant before
    # the transition): bisect between the two for the transition itself.
    lo = w.replace(tzinfo=zone, fold=1).astimezone(_UTC)
    hi = w.replace(tzinfo=zone, fold=0).astimezone(_UTC)
    after_off = hi.astimezone(zone).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) // 2
        if mid.astimezone(zone).utcoffset() == after_off:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def _offset(t: datetime) -> timedelta:
    """The UTC offset of an instant in a ZoneInfo zone (never None for those)."""
    off = t.utcoffset()
    assert off is not None
    return off


def _instants(c: _Cron, w: datetime, zone: ZoneInfo) -> tuple[datetime, ...]:
    """The UTC instants at which wall-clock match `w` fires, earliest first."""
    a0 = w.replace(tzinfo=zone)
    a1 = w.replace(tzinfo=zone, fold=1)
    off0, off1 = _offset(a0), _offset(a1)
    if off0 == off1:
        return (a0.astimezone(_UTC),)
    if off0 < off1:  # spring-forward: w does not exist
        return (_gap_end(w, zone),)
    # fall-back: w happens twice
    if c.hour_star:
        return (a0.astimezone(_UTC), a1.astimezone(_UTC))
    return (a0.astimezone(_UTC),)


def _next(c: _Cron, zone: ZoneInfo, after: datetime) -> datetime:
    after = after.astimezone(_UTC)
    naive = after.replace(tzinfo=None)
    # Start early enough that the second pass of a repeated hour is seen.
    off = min(_offset(after.astimezone(zone)), _offset((after + _FOLD_LOOKAHEAD).astimezone(zone)))
    start = (naive + off).replace(second=0, microsecond=0) - _MINUTE
    it = copy.copy(c.proto)
    it.set_current(start)
    best: datetime | None = None
    while True:
        w = it.get_next(datetime)
        if not c.matches(w):  # croniter disagrees with our field sets: skip it
            continue
        instants = _instants(c, w, zone)
        if best is not None and instants[0] >= best:
            return best
        for t in instants:
            if t > after:
                if t == instants[0]:
                    return t  # later candidates cannot fire earlier than this one
                best = t if best is None or t < best else best
                break


def next_occurrence(expr: str, tz: str | ZoneInfo, after: datetime) -> datetime:
    """The first firing instant of `expr` in zone `tz` strictly after `after` (aware), in UTC."""
    if not isinstance(after, datetime) or after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("after must be an aware datetime")
    return _next(_parse(expr), _zone(tz), after)


def next_occurrences(items: Iterable[tuple[str, str | ZoneInfo]], after: datetime) -> list[datetime]:
    """next_occurrence for each (expr, tz), computed once per distinct pair.

    Raises on the first invalid expression or zone, like next_occurrence.
    """
    out = []
    for r in try_next_occurrences(items, after):
        if isinstance(r, Exception):
            raise r
        out.append(r)
    return out


def try_next_occurrences(items: Iterable[tuple[str, str | ZoneInfo]], after: datetime) -> list[datetime | Exception]:
    """Like next_occurrences, but an item that cannot be computed (an unknown zone, an
    expression this module refuses, any error in the computation) gets its exception
    in its place instead of failing the others: the scheduler sets it aside."""
    if not isinstance(after, datetime) or after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("after must be an aware datetime")
    memo: dict[tuple[str, str | ZoneInfo], datetime | Exception] = {}
    out: list[datetime | Exception] = []
    for key in items:
        r = memo.get(key)
        if r is None:
            try:
                r = _next(_parse(key[0]), _zone(key[1]), after)
            except Exception as e:  # noqa: BLE001 - one bad schedule must not stop the others
                r = e
            memo[key] = r
        out.append(r)
    return out
