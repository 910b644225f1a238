"""BENCHMARKS.md: a header, a summary and one marked section per benchmark.

A run of a subset (`--only claim`) replaces only its own sections and keeps the
others, each of which says when and on what it was measured; the summary is
rebuilt from the sections present.
"""

from __future__ import annotations

import re

from . import machine
from .common import Result, table

ORDER = ("tick", "history", "claim", "lateness", "compare", "schedules", "enqueue", "metrics", "peer", "scale")
_SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->\n", re.S)
_SUMMARY = re.compile(r"<!-- summary: (.*?) -->")

HEADER = """# Benchmarks

Written by `python -m bench` (bench/run.py); re-run it rather than editing this file.
`python -m bench --only claim` re-measures one benchmark and keeps the other sections.
Figures are from one machine at one time: read them with the machine table of their
section, and expect some noise on 2 shared cores. The pictures (bench/figures/) are drawn
by the same run from its raw figures (bench/figures.py; matplotlib, the `bench` extra).

"""


def section(r: Result, m: dict) -> str:
    out = [f"## {r.title}", ""]
    load = r.load or m.get("load")
    loaded = bool(load) and load[0] > machine.LOADED
    out.append(
        f"Measured {r.date or m['date']} on {m['cores']} cores ({m['cpu']}), {m['server'].split(' on ')[0]}, "
        f"fsync={m['settings']['fsync']}, synchronous_commit={m['settings']['synchronous_commit']}"
        + (
            f", load average {' / '.join(f'{x:.2f}' for x in load)} (1 / 5 / 15 min) at the start of this section"
            if load
            else ""
        )
        + "."
    )
    if loaded:
        out += [
            "",
            f"**Measured on a loaded machine** (1-minute load {load[0]:.2f} > {machine.LOADED} on {m['cores']} cores, "
            "shared with other work): the rates are low and noisy; ratios within one round share the load and "
            "mean more. Re-measure on a quiet machine before quoting the rates.",
        ]
    out += ["", "**Setup.**", ""]
    out += [f"- {s}" for s in r.setup]
    out += ["", "**Figures.**", "", table(r.headers, r.rows), ""]
    if r.figure:
        out += [f"![{r.title}: a picture of the figures above]({r.figure})", ""]
    out += [f"**Target:** {r.target}. **Verdict: {r.verdict}.**", ""]
    if r.notes:
        out += ["**Notes.**", ""] + [f"- {n}" for n in r.notes] + [""]
    if r.extra_md:
        out += [r.extra_md, ""]
    verdict = r.verdict + (f" (load {load[0]:.2f})" if loaded else "")
    summary = " | ".join(
        x.replace("|", "/").replace("-->", "") for x in (r.title, r.headline or "-", r.target, verdict)
    )
    out.append(f"<!-- summary: {summary} -->")
    return "\n".join(out) + "\n"


def render(m: dict, results: list[Result], existing: str | None) -> str:
    sections = dict(_SECTION.findall(existing or ""))
    for r in results:
        sections[r.key] = section(r, m)
    keys = [k for k in ORDER if k in sections] + sorted(k for k in sections if k not in ORDER)
    summary_rows = []
    for k in keys:
        found = _SUMMARY.search(sections[k])
        if found:
            summary_rows.append([x.strip() for x in found.group(1).split(" | ")])
    out = [HEADER, "## Machine (of the latest run)", "", table(["", ""], machine.rows(m)), ""]
    if m["settings"]["fsync"] == "off":
        out += [
            "The throwaway cluster that `python -m bench` starts runs with fsync=off, "
            "synchronous_commit=off and full_page_writes=off (durability buys nothing there): "
            "commit latency is not measured except where a benchmark says it switched them on. "
            "Set SCRINALIA_BENCH_DSN to measure a real server.",
            "",
        ]
    out += ["## Summary", "", table(["benchmark", "figure", "target", "verdict"], summary_rows), ""]
    for k in keys:
        out.append(f"<!-- bench:{k} -->\n{sections[k]}<!-- /bench:{k} -->\n")
    return "\n".join(out)
