"""failure.py and handlers.call in-process: whatever a handler raises or returns becomes
a capped, storable text and a fingerprint, and nothing escapes."""

from __future__ import annotations

import os

import pytest

from helpers import make_worker
from scrinalia_workers.runner.failure import (
    MAX_ERROR_CHARS,
    describe_failure,
    printable,
)
from scrinalia_workers.runner.handlers import call


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as e:
        return e


class StrReturnsBytes(Exception):
    def __str__(self):
        return b"not text"  # type: ignore[return-value]


class StrRaisesBase(Exception):
    def __str__(self):
        raise GeneratorExit


class Sly(str):
    def __getitem__(self, item):
        raise RuntimeError("no slicing")

    def encode(self, *args):
        raise RuntimeError("no encoding")


class StrReturnsSly(Exception):
    def __str__(self):
        return Sly("sly text")


@pytest.mark.parametrize(
    "exc,head",
    [
        (StrReturnsSly(), "StrReturnsSly: sly text"),
        (RuntimeError("a\x00b"), "RuntimeError: a\\x00b"),
        (RuntimeError(os.fsdecode(b"\xff\xfe.pdf")), "RuntimeError: \\udcff\\udcfe.pdf"),
        (RuntimeError("bell\x07 esc\x1b del\x7f c1\x85"), "RuntimeError: bell\\x07 esc\\x1b del\\x7f c1\\x85"),
        (StrReturnsBytes(), "StrReturnsBytes: <exception str() failed>"),
        (StrRaisesBase(), "StrRaisesBase: <exception str() failed>"),
        (SystemExit(), "SystemExit"),
        (KeyError("k\u00e9"), "KeyError: 'k\u00e9'"),
    ],
)
def test_texts_are_printable_and_say_what_happened(exc, head):
    text, fp = describe_failure(_raised(exc))
    assert text.splitlines()[0] == head
    assert "\x00" not in text and len(fp) == 16
    text.encode("utf-8")  # no lone surrogate left: this would raise


def test_a_huge_message_is_capped_and_keeps_the_traceback():
    text, _ = describe_failure(_raised(ValueError("y" * 10_000_000)))
    assert len(text) <= MAX_ERROR_CHARS
    assert "characters cut" in text and "test_runner_failure.py" in text


def test_an_exception_never_raised_has_no_traceback():
    text, fp = describe_failure(ValueError("built, not raised"))
    assert text == "ValueError: built, not raised" and len(fp) == 16


def test_the_fingerprint_is_the_kind_of_failure_not_its_data():
    def fails(n):
        raise LookupError(f"document {n} missing")

    def fails_elsewhere(n):
        raise LookupError(f"document {n} missing")

    fps = []
    for f, n in ((fails, 1), (fails, 2), (fails_elsewhere, 1)):
        try:
            f(n)
        except LookupError as e:
            fps.append(describe_failure(e)[1])
    assert fps[0] == fps[1] != fps[2]


def test_printable_keeps_tab_newline_and_letters():
    assert printable("a\tb\nc \u00e9\u4e2d") == "a\tb\nc \u00e9\u4e2d"


@pytest.mark.parametrize(
    "value,status",
    [
        (None, "SUCCEEDED"),
        ("ok", "SUCCEEDED"),
        ({"n": 1}, "SUCCEEDED"),
        (False, "FAILED"),
        (0, "FAILED"),
        ([1], "FAILED"),
        (object(), "FAILED"),
    ],
)
def test_the_return_rule(value, status):
    assert call(lambda run: value, {}).status == status


def test_a_summary_is_one_capped_line():
    out = call(lambda run: {"text": "line1\nline2" + "z" * 1000}, {})
    assert out.status == "SUCCEEDED" and "\n" not in out.summary and len(out.summary) <= 200


def test_a_dict_whose_repr_fails_is_still_success():
    class Weird(dict):
        def __repr__(self):
            raise RuntimeError("no repr")

    out = call(lambda run: Weird(), {})
    assert out.status == "SUCCEEDED" and out.summary == "<unprintable summary>"


def test_the_handler_gets_a_copy():
    run = {"run_id": 1, "config": {}}
    call(lambda r: r.clear(), run)
    assert run == {"run_id": 1, "config": {}}


def test_every_text_is_accepted_by_finish(db):
    # the database is the judge of "storable": each text goes through finish()
    make_worker(db, "t")
    samples = [
        RuntimeError("\x00"),
        RuntimeError(os.fsdecode(b"\xff")),
        RuntimeError("x" * 10_000_000),
        StrRaisesBase(),
        RuntimeError("\ud800 lone high surrogate"),
    ]
    for exc in samples:
        db.execute("SELECT scrinalia.enqueue('t')")
        run_id, token = db.execute("SELECT run_id, lease_token FROM scrinalia.claim_next('t1')").fetchone()
        text, fp = describe_failure(_raised(exc))
        row = db.execute(
            "SELECT status::text, error FROM scrinalia.finish(%s, %s, 'FAILED', %s, %s)", (run_id, token, text, fp)
        ).fetchone()
        assert row == ("FAILED", text)


def test_cap_says_what_was_cut():
    from scrinalia_workers.runner.failure import cap

    assert cap("short", 100) == "short"
    long = cap("x" * 10_000, 200)
    assert len(long) <= 200 and long.endswith(f"[... {10_000 - long.index(' [')} characters cut]")
    assert cap("kept", 100, original=5000) == "kept [... 4996 characters cut]"


def test_a_returned_str_subclass_that_lies_is_still_success():
    out = call(lambda run: Sly("done"), {})
    assert out.status == "SUCCEEDED" and out.summary == "done"
