"""The trend report's bench plots read as a newcomer needs: one colour and marker per system in
every panel, a legend entry for every series, client-bound figures marked, latency p50/p99 for
every system, a headline of every system in one scenario. Read back from matplotlib's artists."""
import datetime

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pelotari.analysis import report  # noqa: E402

T0 = datetime.datetime(2026, 11, 20, 12)
SYSTEMS = ("pelotari", "pelotari-packed", "reference", "redis", "brand-new")
SCENARIOS = ((16, 1), (16, 16), (1024, 4))


def rows():
    throughput, latency = [], []
    for c, commit in enumerate(("aaaaaaaa1", "bbbbbbbb2")):
        for s, system in enumerate(SYSTEMS):
            for payload, subs in SCENARIOS:
                if system == "redis" and (payload, subs) == (16, 1):
                    continue  # not every system runs every scenario: panels differ
                sc = f"S={payload} N={subs} P=1"
                when = T0 + datetime.timedelta(days=c)
                throughput.append(dict(scenario=sc, payload=payload, subscribers=subs,
                                       system=system, commit=commit, time=when,
                                       delivered_rate=1e5 * (s + 1) * (c + 1),
                                       ingress_rate=1e5, client_bound=(s % 2 == 0), runs=1))
                latency.append(dict(scenario=sc, system=system, commit=commit, time=when,
                                    p50_us=100.0 + s, p90_us=200.0, p99_us=1000.0 + 10 * s))
    targets = [dict(scenario=r["scenario"], commit=r["commit"], time=r["time"],
                    target="pelotari/reference", numerator="pelotari", denominator="reference",
                    numerator_rate=1.0, denominator_rate=1.0, ratio=1.0 + 0.1 * k)
               for k, r in enumerate(throughput) if r["system"] == "pelotari"]
    return {"throughput": throughput, "latency": latency, "targets": targets}


@pytest.fixture
def figures(tmp_path, monkeypatch):
    """The figures _bench_plots draws, kept open to be read back."""
    kept = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    paths = report._bench_plots(rows(), tmp_path, plt)
    monkeypatch.undo()
    yield {p.name: fig for p, fig in zip(paths, kept)}
    for fig in kept:
        close(fig)


def test_every_plot_is_written(figures, tmp_path):
    assert set(figures) == {"throughput.png", "ratios.png", "latency.png", "headline.png"}
    for name in figures:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_a_system_has_one_colour_and_marker_in_every_panel(figures):
    fig = figures["throughput.png"]
    seen = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_marker() in ("None", None, ""):
                continue
            key = (line.get_color(), line.get_marker())
            seen.setdefault(key, 0)
            seen[key] += 1
    styles = {report.system_style(s)[1:] for s in SYSTEMS}
    assert set(seen) == styles  # nothing drawn in a colour or marker of another system
    assert len(styles) == len(SYSTEMS)  # and no two systems share one


def test_the_legend_lists_every_system_and_the_client_bound_mark(figures):
    fig = figures["throughput.png"]
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:len(SYSTEMS)] == [report.system_style(s)[0] for s in
                                    report._system_order(SYSTEMS)]
    assert any("client-bound" in label for label in labels)
    assert "pelotari, packed clients (extension)" in labels  # packed named as a client mode


def test_client_bound_points_are_hollow(figures):
    fig = figures["throughput.png"]
    faces = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_marker() not in ("None", None, ""):
                faces.setdefault(line.get_color(), set()).add(line.get_markerfacecolor())
    for k, system in enumerate(SYSTEMS):
        colour = report.system_style(system)[1]
        assert faces[colour] == ({"white"} if k % 2 == 0 else {colour}), system


def test_x_axes_say_commit_and_date(figures):
    ax = figures["throughput.png"].axes[0]
    assert "commit" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["aaaaaaaa\n11-20", "bbbbbbbb\n11-21"]


def test_ratios_are_bars_not_lines_with_the_parity_line(figures):
    ax = figures["ratios.png"].axes[0]
    assert [line for line in ax.get_lines() if len(line.get_xdata()) > 2] == []
    assert len(ax.patches) == len(SCENARIOS)  # one bar per scenario for the one target
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(label.startswith("1.0") for label in labels)


def test_latency_has_p99_bars_and_p50_ticks_for_every_system(figures):
    ax = figures["latency.png"].axes[0]
    heights = sorted(round(p.get_height()) for p in ax.patches)
    expected = sorted(1000 + 10 * s for s, system in enumerate(SYSTEMS)
                      for payload, subs in SCENARIOS
                      if not (system == "redis" and (payload, subs) == (16, 1)))
    assert heights == expected  # the latest commit's p99 of every system in every scenario
    ticks = [line for line in ax.get_lines() if line.get_marker() == "_"]
    assert len(ticks) == len(expected)
    assert "p99" in ax.get_title() and "p50" in ax.get_title()


def test_the_headline_shows_every_system_in_one_scenario(figures):
    fig = figures["headline.png"]
    rates, p99 = fig.axes
    assert len(rates.patches) == len(p99.patches) == len(SYSTEMS)
    assert sorted(round(p.get_width()) for p in rates.patches) == [
        200000 * (s + 1) for s in range(len(SYSTEMS))]  # the latest commit's rates
    assert "S=16 N=16 P=1" in fig._suptitle.get_text()
    hatched = [p for p in rates.patches if p.get_hatch()]
    assert len(hatched) == 3  # the client-bound ones


def test_an_unknown_system_gets_a_stable_style():
    assert report.system_style("brand-new") == report.system_style("brand-new")
    assert report.system_style("brand-new")[0] == "brand-new"
