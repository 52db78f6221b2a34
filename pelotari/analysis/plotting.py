"""What the trend report's pictures and summary tables share: figures and durations in words
(_ms, _seconds, plural), the newest rows per configuration (latest_per), the notes on commits and
runs, log axes, grouped bars, goal lines, category axes and a legend under the figure.

The underscored names are the analysis package's own (the report_<protocol> modules import them),
not an API."""
import math
from typing import List


def _short(commit: str) -> str:
    return (commit or "unknown")[:8]


def plural(n: int, word: str) -> str:
    """'1 subscriber', '16 subscribers'."""
    return f"{n:,} {word if n == 1 else word + 's'}"


def latest_per(rows: List[dict], *key: str) -> List[dict]:
    """The rows of each `key` combination's newest commit (by its first run's time), so a
    configuration measured only at an older commit still shows with its last figures."""
    def when(r):  # records without an env (no time, no commit) are the oldest
        return (r["time"] is not None, r["time"] if r["time"] is not None else 0,
                r["commit"] or "")
    newest = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        if k not in newest or when(r) > newest[k]:
            newest[k] = when(r)
    return [r for r in rows if when(r) == newest[tuple(r[c] for c in key)]]


def _number(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _ms(v_ms, signed: bool = False) -> str:
    """A duration in ms, to about three significant figures; "—" if unknown."""
    if not _number(v_ms):
        return "—"
    sign = "+" if signed and v_ms >= 0 else ""
    a = abs(v_ms)
    if a >= 10_000:
        return f"{sign}{v_ms / 1000:.0f} s"
    return f"{sign}{v_ms:.{2 if a < 10 else 1 if a < 100 else 0}f} ms"


def _seconds(v_s) -> str:
    return _ms(v_s * 1000 if _number(v_s) else None)


def _commits_note(rows: List[dict]) -> str:
    commits = sorted({_short(r["commit"]) for r in rows})
    return f"commit {commits[0]}" if len(commits) == 1 else f"commits {', '.join(commits)}"


def _runs_note(rows: List[dict]) -> str:
    runs = sorted({r["runs"] for r in rows})
    return f"{runs[0]} run{'s' if runs[0] > 1 else ''}" if len(runs) == 1 else \
        f"{runs[0]}–{runs[-1]} runs"


def _log_axis(ax, fmt) -> None:
    """A log y axis spanning a decade at least, its decades labelled by fmt (no 10^k)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    if hi / lo < 10:
        mid = math.sqrt(lo * hi)
        ax.set_ylim(mid / math.sqrt(10), mid * math.sqrt(10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    lo, hi = ax.get_ylim()
    if math.log10(hi / lo) < 2.5:  # few decades: label 2 and 5 of each too
        def minor(v, _):
            mantissa = round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
            return fmt(v) if mantissa in (2, 5) else ""
        ax.yaxis.set_minor_formatter(FuncFormatter(minor))
        ax.tick_params(axis="y", which="minor", labelsize=8)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def _ms_tick(v_ms: float) -> str:
    return f"{v_ms / 1000:g} s" if v_ms >= 1000 else f"{v_ms:g} ms"


def _bars(ax, series, fmt, width: float = 0.8) -> None:
    """Grouped bars: series are (label, values per category (None: not measured), style[,
    notes per category]), side by side within each category, each bar labelled with
    fmt(value) and its note below that."""
    w = width / len(series)
    for j, (label, values, style, *notes) in enumerate(series):
        first = True
        for i, v in enumerate(values):
            if not _number(v):
                continue
            x = i + (j - (len(series) - 1) / 2) * w
            ax.bar(x, v, w * 0.95, label=label if first else None, **style)
            first = False
            text = fmt(v) + (f"\n{notes[0][i]}" if notes and notes[0][i] else "")
            ax.annotate(text, (x, v), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points",
                        bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.3))


def _goal(ax, y: float, label: str, color: str = "black", side: str = "right",
          written: bool = True) -> None:
    """A dashed goal line, its label written on it at the right (or left), or only in the
    legend."""
    ax.axhline(y, color=color, lw=1, ls="--", label=label)
    if written:
            ax.annotate(label, (1 if side == "right" else 0, y), xycoords=("axes fraction", "data"),
                    xytext=(-4 if side == "right" else 4, 3), textcoords="offset points", ha=side,
                    va="bottom", fontsize=8, color=color,
                    bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.3))


def _categories(ax, names: List[str]) -> None:
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.grid(alpha=0.3, axis="y", which="both")


def _figure_legend(fig, axes, ncol: int = 2) -> None:
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)


def _check(ok: bool) -> str:
    return " ✓" if ok else " ✗"


def _wrap(text: str, width: int = 112) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
