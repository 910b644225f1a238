"""Cron expressions to check the Python and SQL validators against: hand-written
edge cases and a seeded random corpus of valid and mutated ones."""

from __future__ import annotations

import random

FRAGMENTS = [
    "*",
    "*/1",
    "*/2",
    "*/7",
    "*/8",
    "*/12",
    "*/13",
    "*/24",
    "*/25",
    "*/31",
    "*/32",
    "*/59",
    "*/60",
    "*/61",
    "*/0",
    "*/00",
    "*/",
    "*/x",
    "*/100",
    "0",
    "00",
    "1",
    "01",
    "6",
    "7",
    "8",
    "12",
    "13",
    "23",
    "24",
    "31",
    "32",
    "59",
    "60",
    "99",
    "100",
    "-1",
    "+1",
    "1.5",
    "0-7",
    "1-7",
    "0-6",
    "1-12",
    "1-31",
    "0-23",
    "0-59",
    "5-3",
    "3-3",
    "1-2-3",
    "1-5/2",
    "1-5/0",
    "1-5/60",
    "1-5/",
    "5/10",
    "1/1",
    "1,2",
    "1,,2",
    ",1",
    "1,",
    ",",
    "*,5",
    "5,*",
    "*/2,5",
    "**",
    "*-5",
    "1-*",
    "L",
    "5L",
    "LW",
    "15W",
    "W",
    "5#3",
    "#",
    "?",
    "H",
    "H/5",
    "H(0-29)",
    "JAN",
    "jan",
    "Jan",
    "DEC",
    "JAN-MAR",
    "MAR-JAN",
    "JAN-MAR/2",
    "JAN/2",
    "1-DEC",
    "JANUARY",
    "JA",
    "FOO",
    "SUN",
    "sun",
    "SAT",
    "MON-FRI",
    "FRI-MON",
    "SAT-SUN",
    "SUN-SAT",
    "MON-5",
    "MON-7",
    "7-MON",
    "MONDAY",
    "MO",
    "٣",
    "１",
    "ſun",
    "K",
    "l",
    "w",
    "h",
    "?/2",
    "*/*",
    "1-",
    "-",
    "/",
    "a-b",
    "0x1",
    "1e1",
    "(1)",
    "[1]",
    "{1}",
    "'1'",
    '"1"',
    "%",
    "$1",
    "\\1",
    "1;",
    "é",
]

WHOLE = [
    None,
    "",
    " ",
    "\t",
    " \t ",
    "* * * *",
    "* * * * * *",
    "0 0 * * * 2026",
    "*",
    "@daily",
    "@hourly",
    "@reboot",
    "@every 5m",
    "@ * * * *",
    "@daily * * * *",
    "0 0 * * *\n",
    "\n0 0 * * *",
    "0\n0 * * *",
    "0 0 * * *\r",
    "0\u00a00 * * * *",
    "0\u30000 * * * *",
    " 0 0 * * * ",
    "\t0\t0\t*\t*\t*\t",
    "0  0  *  *  *",
    "0 0 * * " + "*" * 192,
    "0 0 * * " + "*" * 191,
    "0 0 * * *" + " " * 191,
    "0 0 * * *" + " " * 192,
    "* " * 100,
    "* " * 101,
    "0 0 30 2 *",
    "0 0 31 2 *",
    "0 0 31 4,6,9,11 *",
    "0 0 31 2 MON",
    "0 0 31 2 */2",
    "0 0 31 2 *,MON",
    "0 0 29 2 *",
    "0 0 */30 2 *",
    "0 0 30,31 FEB *",
    "0 0 30 JAN-FEB/1 *",
    "0 0 30 FEB-MAR/2 *",
    "0 0 31 1-12/3 *",
    "0 0 31 2-12/2 *",
    "0 0 31,*/5 2 *",
    "0 0 30 2 7",
    "60 24 32 13 8",
    "0 24 31 2 *",
    "0 0 31 2 8",
]


def hand_written() -> list[str | None]:
    out = list(WHOLE)
    for frag in FRAGMENTS:
        for f in range(5):
            fields = ["*"] * 5
            fields[f] = frag
            out.append(" ".join(fields))
    return out


LOW, HIGH = (0, 0, 1, 1, 0), (59, 23, 31, 12, 7)
NAMES = (
    None,
    None,
    None,
    "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(),
    "SUN MON TUE WED THU FRI SAT".split(),
)
NOISE = list("0123456789*/-,  \tLWH#?@") + ["MON", "jan", "60", "99", "/0", "--", ",,", "\n", "ſ", "٣"]


def gen_valid(rng: random.Random) -> str:
    fields = []
    for f in range(5):
        lo, hi = LOW[f], HIGH[f]

        def tok(v: int) -> str:
            names = NAMES[f]
            if names and rng.random() < 0.3 and v - lo < len(names):
                return rng.choice([str.upper, str.lower, str.title])(names[v - lo])
            return ("0" if v < 10 and rng.random() < 0.2 else "") + str(v)

        items = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            k = rng.random()
            if k < 0.3:
                items.append("*" + (f"/{rng.randint(1, hi - lo + 1)}" if rng.random() < 0.5 else ""))
            elif k < 0.6:
                items.append(tok(rng.randint(lo, hi)))
            else:
                a, b = sorted((rng.randint(lo, hi), rng.randint(lo, hi)))
                step = f"/{rng.randint(1, hi - lo + 1)}" if rng.random() < 0.5 else ""
                items.append(f"{tok(a)}-{tok(b)}{step}")
        fields.append(",".join(items))
    seps = [rng.choice([" ", "  ", "\t", " \t"]) for _ in range(4)]
    text = fields[0] + "".join(s + f for s, f in zip(seps, fields[1:]))
    return rng.choice(["", " ", "\t"]) + text + rng.choice(["", " ", "\t "])


def mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        k = rng.random()
        pos = rng.randint(0, len(chars))
        if k < 0.4:
            chars.insert(pos, rng.choice(NOISE))
        elif k < 0.7 and chars:
            del chars[min(pos, len(chars) - 1)]
        elif chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(NOISE)
    return "".join(chars)


def generated(n: int = 4000) -> list[str]:
    rng = random.Random(20261025)
    out = []
    for _ in range(n // 2):
        v = gen_valid(rng)
        out.append(v)
        out.append(mutate(rng, v))
    return out
