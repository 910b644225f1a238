"""The frame every page shares: its head, the navigation, who is looking, and the one
style sheet (served from /style.css: the Content-Security-Policy allows no inline style)."""

from __future__ import annotations

from datetime import datetime

from scrinalia_workers.presentation.fmt import utc
from scrinalia_workers.web.markup import Html, html
from scrinalia_workers.web.panels import View

STYLE = """\
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #1d1d1d; background: #fff; }
header { display: flex; gap: 2em; align-items: baseline; border-bottom: 2px solid #333; margin-bottom: 1em; }
header .brand { font-size: 1.3em; margin: .3em 0; }
nav a { margin-right: 1.2em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
h3 { font-size: 1em; margin: 1em 0 .3em; }
table { border-collapse: collapse; margin-bottom: .5em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #eee; }
td { max-width: 40em; overflow-wrap: break-word; }
.login, .note, .none { color: #555; }
.healthy { color: #146c2e; font-weight: bold; }
.unhealthy, .FAILED, .INTERRUPTED, .alert { color: #a40000; font-weight: bold; }
.SUCCEEDED { color: #146c2e; }
.RUNNING, .QUEUED { color: #0b4f9c; }
.CANCELLED, .paused { color: #6b5300; }
.denied { background: #fff4d6; border: 1px solid #d8b24a; padding: .4em .6em; }
.failed, .error { background: #fde8e8; border: 1px solid #d07070; padding: .4em .6em; }
.advice { color: #0b4f9c; }
form.act { display: inline; margin: 0 .2em 0 0; }
form.act button { font-size: .85em; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
dt { font-weight: bold; }
dd { margin: 0; overflow-wrap: break-word; }
.period { margin-left: 1em; }
"""


def page(view: View, title: str, now: datetime | None, body: Html) -> Html:
    mode = "actions enabled" if view.actions else "read-only"
    return html(
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/style.css"><title>{t} - scrinalia-workers</title></head>'
        '<body><header><strong class="brand">scrinalia-workers</strong>'
        '<nav><a href="/">overview</a><a href="/runs">runs</a></nav>'
        '<span class="login">login {l} ({k}), {m}; database time {n}</span></header>'
        "<main><h1>{t}</h1>{b}</main></body></html>\n",
        t=title,
        l=view.login.name,
        k=view.login.kind,
        m=mode,
        n=utc(now) or "unknown",
        b=body,
    )


def message_page(title: str, text: str, back: str = "/") -> Html:
    """A page of one message (a refused or done action, a page not found), outside any view."""
    return html(
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8"><link rel="stylesheet" href="/style.css">'
        "<title>{t} - scrinalia-workers</title></head>"
        '<body><h1>{t}</h1><p>{m}</p><p><a href="{b}">back</a></p></body></html>\n',
        t=title,
        m=text,
        b=back,
    )
