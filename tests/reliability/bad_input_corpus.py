"""Generated corpora of bad input: cron expressions, zones, requests, hostile names.

Every item is invalid by the documented rules (docs/cron.md, DESIGN.md); the tests
feed them through every entry point and expect a clean, classified refusal.
"""

from __future__ import annotations

import itertools
import json

FIELDS = ["0", "2", "*", "*", "*"]  # a valid base: "0 2 * * *"
LOWS = [0, 0, 1, 1, 0]
HIGHS = [59, 23, 31, 12, 7]


def _with(field: int, value: str) -> str:
    f = list(FIELDS)
    f[field] = value
    return " ".join(f)


def invalid_crons() -> list[tuple[str, str]]:
    """(category, expression) pairs, several hundred, all of which must be refused."""
    out: list[tuple[str, str]] = []

    def add(cat, *exprs):
        out.extend((cat, e) for e in exprs)

    # wrong field counts (0..4, 6, 7 fields), seconds and year fields
    for n in (1, 2, 3, 4, 6, 7):
        add("field count", " ".join(["*"] * n))
    add("field count", "", " ", "\t", "0 0 * *", "0 0 * * * *", "0 0 0 * * * 2026", "* * * * * * *")
    add("seconds field", "*/10 * * * * *", "0 0 2 * * *", "30 0 2 * * MON")
    # unsupported special characters in every field
    for f in range(5):
        for tok in ("L", "W", "#", "?", "H", "5L", "15W", "LW", "H/5", "H(0-29)", "MON#2", "?" * 2, "6#3", "L-3"):
            add("L/W/#/?/H", _with(f, tok))
    # macros
    add(
        "macro",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@reboot",
        "@every 5m",
        "@DAILY",
        " @daily",
        "@daily ",
        "@ daily",
        "@daily * * * *",
    )
    # out of range, per field, both ends and far
    for f in range(5):
        for v in (LOWS[f] - 1, HIGHS[f] + 1, 99, 100, 999, 2**31, -5):
            if v < 0:
                add("out of range", _with(f, str(v)))
            else:
                add("out of range", _with(f, str(v)))
                add("out of range", _with(f, f"{LOWS[f]}-{v}"))
                add("out of range", _with(f, f"{v},{LOWS[f]}"))
    # bad steps
    for f in range(5):
        for s in ("*/0", "*/", "*/-1", "*/x", "/5", "5/", "*/1.5", "*/99", "*/100", "1-5/0", "1/2/3", "*//2", "*/ 2"):
            add("bad step", _with(f, s))
    add("bad step", "5/10 * * * *", "0 3/2 * * *")  # a step needs * or a range
    # reversed ranges
    add(
        "reversed range",
        "30-10 * * * *",
        "0 20-5 * * *",
        "0 0 20-10 * *",
        "0 0 * 11-2 *",
        "0 0 * * 5-1",
        "0 0 * DEC-JAN *",
        "0 0 * * FRI-MON",
        "59-0 * * * *",
        "0 23-0 * * *",
    )
    # empty items and list punctuation
    for f in range(5):
        for tok in (",", "1,", ",1", "1,,2", "-", "1-", "-1", "1--2", ",,", "1-2-3"):
            add("empty item", _with(f, tok))
    # names where they are not allowed, bad names
    add(
        "bad name",
        "MON * * * *",
        "0 JAN * * *",
        "0 0 MON * *",
        "0 0 * MON *",
        "0 0 * * JAN",
        "0 0 * JANUARY *",
        "0 0 * * MONDAY",
        "0 0 * * SU",
        "0 0 * JA *",
        "0 0 * * XYZ",
        "0 0 * * MON-7x",
    )
    # unicode digits and look-alikes
    for digit in ("\u0663", "\u0967", "\uff10", "\uff12", "\u00b2", "\u2082", "\u0e51", "\U0001d7ce", "\u2460"):
        add("unicode digit", _with(0, digit), _with(1, f"1{digit}"), _with(2, digit))
    add("unicode digit", "\u0660 \u0662 * * *", "０ ２ * * *", "0 2 \uff0a * *", "0 2 * * \u2217")
    # whitespace tricks: NBSP, ideographic space, em space, zero-width, CR/LF, VT/FF inside
    for ws in ("\u00a0", "\u3000", "\u2003", "\u200b", "\u2028", "\r", "\n", "\x0b", "\x0c", "\ufeff"):
        add("whitespace", ws.join(FIELDS), "0 2 * *" + ws + "*", ws + "0 2 * * *x")
    add("whitespace", "0 2 * * *\n", "\n0 2 * * *", "0\n2 * * *", "0 2 * * *\r\n", "0 2 * * *\x00"[:-1] + "\u200b")
    # junk, injection, overlength
    add(
        "junk",
        "0 2 * * *;",
        "0 2 * * * ; DROP TABLE x",
        "0 2 * * *'",
        "'0 2 * * *'",
        "0 2 * * %s",
        "0 2 * * \\*",
        "0 2 * * $1",
        "0 2 * * (1)",
        "0 2 * * {1}",
        "0 2 * * [1]",
        "0x1 2 * * *",
        "1e1 2 * * *",
        "+1 2 * * *",
        "1.0 2 * * *",
        "0 2 * * 1;2",
        "0 2 * * ~",
        "0 2 * * *" + "," * 300,
        " ".join(["1"] * 5) + " " + "1" * 300,
        "0 2 * * " + ",".join(["1"] * 150),
    )
    # day-of-month that exists in none of the selected months (would never fire)
    add("never fires", "0 0 30 2 *", "0 0 31 4 *", "0 0 31 APR,JUN *", "0 0 30-31 FEB *")
    seen, dedup = set(), []
    for cat, e in out:
        if e not in seen:
            seen.add(e)
            dedup.append((cat, e))
    return dedup


INVALID_ZONES = [
    "",
    " ",
    "UTC ",
    " UTC",
    "Europe/berlin",
    "europe/berlin",
    "Mars/Olympus_Mons",
    "Europe/",
    "/Europe/Berlin",
    "Europe//Berlin",
    "../../etc/passwd",
    "posix/Europe/Berlin",
    "right/UTC",
    "localtime",
    "posixrules",
    "Factory",
    "GMT+25",
    "+25:00",
    "UTC+99",
    "Europe/Berlin\n",
    "Europe/Berlin;",
    "Europe/Berlin' OR '1'='1",
    "%s",
    "\\",
    "Z" * 65,
    "Europe/Berlin" + "x" * 100,
    "Europe/Berl\u0131n",
    "Europe\u2215Berlin",
    "Ameri\u0441a/Sao_Paulo",  # dotless i, division slash, Cyrillic s
]


def oversized_request() -> dict:
    return {"options": {"lang": "por"}, "engine_options": {"psm": 3}, "preset": "fast", "x": "a" * 70_000}


def deep_request(depth: int = 200) -> dict:
    d: dict = {"leaf": 1}
    for _ in range(depth):
        d = {"n": d}
    return {"options": d}


def bad_requests() -> list[tuple[str, object]]:
    """(what, request) pairs every request-taking function must refuse with SW002."""
    return [
        ("not an object (array)", [1, 2]),
        ("not an object (string)", "fast"),
        ("not an object (number)", 3),
        ("not an object (bool)", True),
        ("unknown top-level key", {"engine": "tesseract", "priority": 1}),
        ("unknown key with quote", {"o'; DROP TABLE x; --": 1}),
        ("engine not a string", {"engine": 1}),
        ("engine null", {"engine": None}),
        ("engine list", {"engine": ["tesseract"]}),
        ("unknown engine", {"engine": "gpt"}),
        ("engine case", {"engine": "Tesseract"}),
        ("preset not a string", {"preset": {"fast": True}}),
        ("unknown preset", {"preset": "slow"}),
        ("options not an object", {"options": ["dpi", 300]}),
        ("options null", {"options": None}),
        ("unknown option", {"options": {"colour": True}}),
        ("integer option gets a string", {"options": {"dpi": "300"}}),
        ("integer option gets a float", {"options": {"dpi": 300.5}}),
        ("integer option gets a bool", {"options": {"dpi": True}}),
        ("boolean option gets 0", {"options": {"deskew": 0}}),
        ("number option gets a string", {"options": {"threshold": "0.5"}}),
        ("string option outside its values", {"options": {"lang": "deu"}}),
        ("string option gets a number", {"options": {"lang": 1}}),
        ("engine_options not an object", {"engine_options": "psm=3"}),
        ("engine_options unknown key", {"engine": "tesseract", "engine_options": {"gpu": True}}),
        ("engine_options of the other engine", {"engine": "easyocr", "engine_options": {"psm": 3}}),
        ("engine_options value outside values", {"engine_options": {"oem": 9}}),
        ("deeply nested option", deep_request()),
        ("oversized (> 64 KiB)", oversized_request()),
    ]


def hostile_strings() -> list[str]:
    """Names no worker or runner may have; each must be refused, quoted, not executed."""
    base = [
        "'",
        "''",
        '"',
        "ocr'; DROP TABLE scrinalia.archive_worker_runs; --",
        "ocr;",
        "ocr\\",
        "\\x00",
        "%s",
        "%(x)s",
        "$1",
        "{}",
        "ocr OR 1=1",
        "ocr' OR '1'='1",
        "../ocr",
        "ocr\n",
        "ocr\r\n",
        "\tocr",
        " ocr",
        "ocr ",
        "OCR",
        "ócr",
        "ocr\u200b",
        "ocr\u202e",
        "o" * 64,
        "o" * 10_000,
        "\u00a0",
        "😀",
        "ocr\x1b[31m",
        "",
    ]
    controls = [f"ocr{chr(c)}x" for c in itertools.chain(range(1, 32), [127])]
    return base + controls


def json_text(obj) -> str:
    return json.dumps(obj)
