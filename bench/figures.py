"""Pictures of the distributions a reader would rather look at than read: written to
bench/figures/<key>.png from a Result's raw `data` when the benchmark runs.

matplotlib is imported here only (the `bench` extra), and only when a picture is drawn,
so that the test suite, which does not install it, still imports the benchmarks.
"""

from __future__ import annotations

from pathlib import Path

from .common import Result

SIZE = (8, 4.5)  # inches at 100 dpi: 800 x 450 pixels
DPI = 100


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _ecdf(ax, values: list[float], label: str, **kw) -> None:
    xs = sorted(values)
    n = len(xs)
    ax.step(
        [xs[0] * 1000] + [x * 1000 for x in xs], [0] + [(i + 1) / n for i in range(n)], where="post", label=label, **kw
    )


def lateness(r: Result, plt):
    s = r.data.get("scheduler")
    if not s or not s.get("seen"):
        return None
    cron = s.get("pgcron") or {}
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    ours = s.get("seen_runs") or s["seen"]
    k = len(s["seen"])
    _ecdf(ax, ours, f"scrinalia-workers: {len(ours):,} runs, {_n(k, 'tick')}", color="tab:blue", linewidth=2)
    if s.get("seen_alone"):
        alone = s.get("seen_alone_runs") or s["seen_alone"]
        _ecdf(
            ax,
            alone,
            f"scrinalia-workers alone: {_n(len(s['seen_alone']), 'later minute')} without pg_cron's jobs",
            color="tab:blue",
            linewidth=1.5,
            linestyle="--",
        )
    if cron.get("rounds"):
        vals = [x for rd in cron["rounds"] for x in rd]
        _ecdf(
            ax,
            vals,
            f"pg_cron {cron['version']}: {len(vals):,} job runs, {_n(len(cron['rounds']), 'minute')}",
            color="tab:orange",
            linewidth=2,
        )
    ax.set_xscale("log")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.xaxis.set_major_locator(FixedLocator([m * 10**e for e in range(-1, 5) for m in (1, 2, 5)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("lateness: minute boundary to the commit a LISTENing client sees (ms, log scale)")
    ax.set_ylabel("fraction of runs at most this late")
    ax.set_ylim(0, 1.02)
    ax.axvline(50, color="grey", linestyle=":", linewidth=1, label="50 ms: our p99 target")
    ax.grid(True, which="both", alpha=0.3)
    # below the axes: inside, it would hide the top of a curve
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8.5, frameon=False)
    ax.set_title(
        f"Scheduler lateness: 200 jobs every minute, both systems in the same {k} minute{'s' if k != 1 else ''} (ECDF)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.11, 1, 1))
    return fig


def compare(r: Result, plt):
    drains = r.data.get("drains") or {}
    if not drains:
        return None
    names = list(drains)
    short = {
        "ours": "ours",
        "ours --batch 1": "ours\n--batch 1",
        "bare statements": "bare\nstatements",
        "bare statements, batched": "bare, 32\na claim",
        "pgqueuer": "pgqueuer",
        "pgqueuer, drain mode": "pgqueuer\ndrain mode",
        "procrastinate": "procras-\ntinate",
    }
    given = r.data.get("short") or {}
    labels = [given.get(n) or short.get(n, "ours,\nbig ledger" if "ledger" in n else n) for n in names]
    med = [drains[n]["median"] for n in names]
    lo = [m - drains[n]["min"] for m, n in zip(med, names)]
    hi = [drains[n]["max"] - m for m, n in zip(med, names)]
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    colors = [
        "tab:blue" if n.startswith("ours") else "tab:olive" if n.startswith("bare") else "tab:grey" for n in names
    ]
    bars = ax.bar(labels, med, yerr=[lo, hi], capsize=8, color=colors, width=0.55)
    top = max(med)
    for b, m, h in zip(bars, med, hi):
        inside = m > 0.2 * top  # a short bar gets its figure above it
        ax.text(
            b.get_x() + b.get_width() / 2,
            m * 0.5 if inside else m + h + 0.02 * top,
            f"{m:,.0f}",
            ha="center",
            color="white" if inside else "black",
            fontsize=9,
            fontweight="bold",
        )
    n_jobs = r.data.get("n")
    reps = max(len(drains[n]["rates"]) for n in names)
    ax.set_ylabel("jobs claimed, run and finished per second")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(
        f"Drain rate, 4 worker processes, empty task{f', {n_jobs:,} jobs' if n_jobs else ''}: "
        f"median of {reps}, bars = range",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


DRAW = {"lateness": lateness, "compare": compare}


def draw(r: Result, directory: Path) -> Path | None:
    """Writes directory/<key>.png when the result has a picture; None when it has none,
    failed, or matplotlib is not installed (which is printed, not raised)."""
    if r.key not in DRAW or r.headline == "FAILED":
        return None
    plt = _pyplot()
    if plt is None:
        print(f"{r.key}: no picture (matplotlib is not installed: pip install -e '.[bench]')")
        return None
    fig = DRAW[r.key](r, plt)
    if fig is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{r.key}.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
