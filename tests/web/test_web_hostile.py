"""No byte the database holds reaches a page as markup or as a character that acts.

The terminal's hostile-text test (tests/cli/test_hostile_text.py), adapted to HTML: text
anybody can write through the SQL API (a runner's error, an operator's updated_by or
request, a set-aside error, the last tick's author, a skip reason) is planted with
markup (`<script>`, an attribute break-out with both quotes, an entity) and every class
of acting character, then every page that shows it is read: the markup shows as text,
each acting character as a visible escape. Worker names cannot hold any of it (the
catalogue's CHECK); a name sent in the URL is echoed the same way."""

from __future__ import annotations

import unicodedata
from urllib.parse import quote

import pytest
from webview import HOSTILE, login_dsn

from scrinalia_workers.web.markup import Html, esc, html


def _acting(s: str) -> list[str]:
    return sorted(
        {f"U+{ord(c):04X}" for c in s if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")} - {"U+000A"}
    )


PAGES = ["/", "/runs", "/worker?name=ocr"]


@pytest.mark.parametrize("path", PAGES)
def test_no_page_lets_planted_text_act(planted, db_dsn, role_logins, start_web, path):
    w = start_web(login_dsn(db_dsn, role_logins["operator"]), "--allow-actions")
    a = w.get(path)
    assert a.status == 200, a.body
    assert "<script" not in a.body and "<img" not in a.body and 'onmouseover="' not in a.body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in a.body  # shown, as text
    assert "&amp;amp;" in a.body  # an entity in the data is text too, not an entity
    assert _acting(a.body) == [], _acting(a.body)
    assert "\\x1b[31m" in a.body and "\\u202e" in a.body and "\\n" in a.body  # visible escapes


def test_the_alerts_show_planted_text_as_text(planted, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    body = w.get("/").body
    assert "SCHEDULE_SET_ASIDE" in body and "FAILED_AFTER_ALL_ATTEMPTS" in body
    assert "<script" not in body and _acting(body) == []


def test_a_name_in_the_url_is_echoed_as_text(planted, db_dsn, role_logins, start_web):
    w = start_web(login_dsn(db_dsn, role_logins["reader"]))
    a = w.get("/worker?name=" + quote(HOSTILE))
    assert a.status == 404
    assert "no worker is named x&lt;script&gt;" in a.body and "<script" not in a.body
    assert _acting(a.body) == []


def test_the_template_escapes_every_value_but_its_own_markup():
    made = html('<p title="{t}">{b}</p>', t='"><script>', b=Html("<b>ours</b>"))
    assert made == '<p title="&quot;&gt;&lt;script&gt;"><b>ours</b></p>'
    assert esc(None) == "-" and esc("a\nb") == "a\\nb" and esc("\u202e") == "\\u202e"
    with pytest.raises(ValueError):
        html("{v.__class__}", v="x")  # no lookups into a value
