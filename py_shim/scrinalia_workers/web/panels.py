"""A page is panels; each reads on its own and renders on its own.

A panel this login may not read says so in words (access.Login.cannot_read), a panel
whose read failed says why, and a row that fails to render is an error cell, logged:
the rest of the page renders whatever one panel or row does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.web.access import Login
from scrinalia_workers.web.actions import Actions
from scrinalia_workers.web.markup import Html, esc, html, join

Row = dict[str, Any]


@dataclass
class View:
    """What a page is rendered with: its connection, who is looking, and the actions
    (None when they are not offered: no --allow-actions, or no operator login)."""

    conn: psycopg.Connection[Any]
    login: Login
    log: EventLog
    actions: Actions | None
    page_size: int


@dataclass
class Read:
    rows: list[Row]
    problem: Html | None = None  # instead of the rows: why this login sees none


def read(view: View, what: str, statement: str, params: dict[str, Any] | None = None) -> Read:
    """The rows of `statement`, or the words for why they cannot be shown."""
    try:
        cur = view.conn.cursor(row_factory=dict_row)
        return Read(cur.execute(statement, params or {}).fetchall())
    except psycopg.errors.InsufficientPrivilege:
        return Read([], html('<p class="denied">{m}</p>', m=view.login.cannot_read(what)))
    except psycopg.Error as e:  # a timeout, a lost connection, a value psycopg cannot load
        view.log("web_read_failed", level="error", panel=what, sqlstate=e.sqlstate, error=one_line(e))
        state = f"[{e.sqlstate}] " if e.sqlstate else ""
        return Read([], html('<p class="failed">could not read {w}: {s}{e}</p>', w=what, s=state, e=one_line(e)))


def section(title: str, body: Html, note: str | None = None) -> Html:
    return html(
        "<section><h2>{t}</h2>{n}{b}</section>",
        t=title,
        n=html('<p class="note">{n}</p>', n=note) if note else Html(""),
        b=body,
    )


def table(
    view: View,
    what: str,
    headers: Sequence[str],
    rows: Sequence[Row],
    cells: Callable[[Row], Sequence[Any]],
    empty: str = "none",
) -> Html:
    """A table of `rows`, each made into its cells by `cells`; a row that raises is one
    error cell (logged), never a failed page."""
    head = join(html("<th>{h}</th>", h=h) for h in headers)
    body = []
    for r in rows:
        try:
            body.append(html("<tr>{c}</tr>", c=join(_cell(c) for c in cells(r))))
        except Exception as e:  # noqa: BLE001 - shown in its cell and logged
            view.log("web_row_failed", level="error", panel=what, error=f"{type(e).__name__}: {one_line(e)}")
            body.append(
                html(
                    '<tr><td class="error" colspan="{n}">this row could not be shown ({e}); the log has it</td></tr>',
                    n=len(headers),
                    e=type(e).__name__,
                )
            )
    if not body:
        return html('<p class="none">{e}</p>', e=empty)
    return html("<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>", h=head, b=join(body))


def _cell(value: Any) -> Html:
    """A cell: a (value, css class) pair gets the class; anything else is its text."""
    if isinstance(value, tuple):
        text, css = value
        return html('<td class="{c}">{t}</td>', c=css, t=text)
    return html("<td>{t}</td>", t=esc(value))


def pager(link: str | None, label: str = "older") -> Html:
    if link is None:
        return Html("")
    return html('<p class="pager"><a href="{l}">{t} &rarr;</a></p>', l=link, t=label)
