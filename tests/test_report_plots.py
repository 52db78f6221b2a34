"""The trend report's bench plots read as a newcomer needs: one colour and marker per system in
every panel, a legend entry for every series, client-bound figures marked, latency p50/p99 for
every system, a headline of every system in one scenario. Read back from matplotlib's artists."""
import datetime

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pelotari.analysis import report, report_bully, report_fyrehose, report_swarm  # noqa: E402

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
    paths = report_fyrehose._bench_plots(rows(), tmp_path, plt)
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
    styles = {report_fyrehose.system_style(s)[1:] for s in SYSTEMS}
    assert set(seen) == styles  # nothing drawn in a colour or marker of another system
    assert len(styles) == len(SYSTEMS)  # and no two systems share one


def test_the_legend_lists_every_system_and_the_client_bound_mark(figures):
    fig = figures["throughput.png"]
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:len(SYSTEMS)] == [report_fyrehose.system_style(s)[0] for s in
                                    report_fyrehose._system_order(SYSTEMS)]
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
        colour = report_fyrehose.system_style(system)[1]
        assert faces[colour] == ({"white"} if k % 2 == 0 else {colour}), system


def test_x_axes_say_commit_and_date(figures):
    ax = figures["throughput.png"].axes[0]
    assert "commit" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["aaaaaaaa\n11-20", "bbbbbbbb\n11-21"]


def test_ratios_are_bars_from_parity_not_lines_with_the_parity_line(figures):
    ax = figures["ratios.png"].axes[0]
    assert [line for line in ax.get_lines() if len(line.get_xdata()) > 2] == []
    assert len(ax.patches) == len(SCENARIOS)  # one bar per scenario for the one target
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(label.startswith("1.0") for label in labels)
    # each bar from 1.0 to its ratio: on the log axis its length is the ratio's size
    assert ax.get_yscale() == "log"
    ratios = sorted(r["ratio"] for r in rows()["targets"] if r["commit"] == "bbbbbbbb2")
    assert sorted(p.get_y() + p.get_height() for p in ax.patches) == pytest.approx(ratios)
    assert {p.get_y() for p in ax.patches} == {1.0}


def marker_points(ax):
    """(x, y, filled) of every marker drawn on ax, in data coordinates."""
    return [(x, y, line.get_markerfacecolor() != "white")
            for line in ax.get_lines() if line.get_marker() not in ("None", None, "")
            for x, y in zip(line.get_xdata(), line.get_ydata())]


def bars_on_log_axes(fig):
    """The bars drawn on a log-scaled axis of fig: their length there says nothing. But for
    bars of ratios from 1.0 (on an axis labelled a ratio): their length then is the ratio's."""
    from matplotlib.patches import Rectangle

    def from_parity(ax, bar):
        if ax.get_yscale() == "log":
            return "ratio" in ax.get_ylabel() and bar.get_y() == 1.0
        return "ratio" in ax.get_xlabel() and bar.get_x() == 1.0

    return [p for ax in fig.axes if "log" in (ax.get_xscale(), ax.get_yscale())
            for p in ax.patches if isinstance(p, Rectangle) and not from_parity(ax, p)]


def overlapping_texts(fig):
    """Pairs of written texts of fig (titles, labels, ticks, figures, legends) that overlap."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = set()  # the labels of ticks outside the view: matplotlib does not draw them
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo <= tick.get_loc() <= hi:
                    hidden.update((id(tick.label1), id(tick.label2)))
    texts = [t for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    boxes = [(t.get_text(), t.get_window_extent(renderer).shrunk(0.96, 0.9)) for t in texts]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.overlaps(box_b)]


@pytest.mark.parametrize("name", ["headline.png", "latency.png"])
def test_no_bars_on_log_axes_and_no_text_over_text(figures, name):
    assert bars_on_log_axes(figures[name]) == []
    assert overlapping_texts(figures[name]) == []


def test_latency_has_p50_and_p99_points_for_every_system(figures):
    ax = figures["latency.png"].axes[0]
    expected = [(system, payload, subs) for s, system in enumerate(SYSTEMS)
                for payload, subs in SCENARIOS
                if not (system == "redis" and (payload, subs) == (16, 1))]
    points = marker_points(ax)
    assert sorted(round(y) for _, y, filled in points if filled) == sorted(
        1000 + 10 * SYSTEMS.index(s) for s, *_ in expected)  # each p99 of the latest commit
    assert sorted(round(y) for _, y, filled in points if not filled) == sorted(
        100 + SYSTEMS.index(s) for s, *_ in expected)  # and each p50, hollow
    assert "p99" in ax.get_title() and "p50" in ax.get_title()
    assert "µs" in ax.get_ylabel()


def test_latency_markers_never_overlap_with_every_system_in_every_scenario(tmp_path, monkeypatch):
    """The committed records' shape: ten systems in ten scenarios. Each system's markers stay
    in its slot: neighbours never overlap (the old p50 ticks ran into one black bar)."""
    systems = list(report_fyrehose.SYSTEM_STYLE)
    scenarios = [f"S={s} N={n} P=1" for s in (16, 256, 1024) for n in (1, 4, 16)]
    scenarios.append("S=16 N=1000 P=1")
    latency = [dict(scenario=sc, system=system, commit="c", time=T0, p50_us=100.0, p90_us=150.0,
                    p99_us=1000.0) for sc in scenarios for system in systems]
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    report_fyrehose._latency_plot(latency, scenarios, tmp_path / "latency.png", plt)
    monkeypatch.undo()
    fig = kept[0]
    try:
        ax = fig.axes[0]
        xs = sorted({round(x, 6) for x, _, _ in marker_points(ax)})
        assert len(xs) == len(systems) * len(scenarios)
        px = [ax.transData.transform((x, 1000.0))[0] for x in xs]
        widths = [(line.get_markersize() + line.get_markeredgewidth()) * fig.dpi / 72
                  for line in ax.get_lines() if line.get_marker() not in ("None", None, "")]
        assert min(b - a for a, b in zip(px, px[1:])) > max(widths)
        assert min(widths) >= 3 * fig.dpi / 72  # and still big enough to tell apart
        assert overlapping_texts(fig) == []
    finally:
        plt.close(fig)


def test_the_headline_shows_every_system_in_one_scenario(figures):
    fig = figures["headline.png"]
    rates, p99 = fig.axes
    assert rates.get_xscale() == p99.get_xscale() == "log"
    rate_points, p99_points = marker_points(rates), marker_points(p99)
    assert len(rate_points) == len(p99_points) == len(SYSTEMS)
    assert sorted(round(x) for x, _, _ in rate_points) == [
        200000 * (s + 1) for s in range(len(SYSTEMS))]  # the latest commit's rates
    assert "S=16 N=16 P=1" in fig._suptitle.get_text()
    hollow = [p for p in rate_points if not p[2]]
    assert len(hollow) == 3  # the client-bound ones
    assert "hollow" in fig.legends[0].get_texts()[0].get_text()
    figures_written = {t.get_text() for t in rates.texts}
    assert "1.00M" in figures_written  # each point has its figure beside it


def test_an_unknown_system_gets_a_stable_style():
    assert report_fyrehose.system_style("brand-new") == report_fyrehose.system_style("brand-new")
    assert report_fyrehose.system_style("brand-new")[0] == "brand-new"


# ---- bully.png and swarm.png --------------------------------------------------------------------

def keep_figure(draw, monkeypatch):
    """Run draw(plt) and return the figure it drew, kept open to be read back."""
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    draw(plt)
    monkeypatch.undo()
    return kept[0]


def look(line):
    """What tells a legend entry's line apart where it is drawn: colour, marker and its fill,
    and the line style once it joins two points."""
    joined = len(line.get_xdata()) > 1 and line.get_linestyle() not in ("None", "")
    return (line.get_color(), line.get_marker(), line.get_markerfacecolor(),
            line.get_linestyle() if joined else None)


def hidden_legend_entries(ax):
    """Labels of ax's lines a reader cannot find: no points, the same points as another line
    (one covers the other), or the same look as another where either has one point."""
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    hidden = [line.get_label() for line in lines if len(line.get_xdata()) == 0]
    for i, a in enumerate(lines):
        for b in lines[i + 1:]:
            same_points = (list(a.get_xdata()) == list(b.get_xdata())
                           and list(a.get_ydata()) == list(b.get_ydata()))
            if same_points or look(a) == look(b):
                hidden.append(f"{a.get_label()} / {b.get_label()}")
    return hidden


def election(where, how, nodes, after_s, messages, commit="c1"):
    return dict(where=where, how=how, nodes=nodes, commit=commit, time=T0, detect_s=0.002,
                elected_after_detect_s=after_s, elected_s=after_s + 0.002, messages=messages,
                textbook_messages=nodes * (nodes - 1) // 2, runs=5, agreed=1.0)


SERIES = (("simulator", "kill"), ("simulator", "crash"), ("processes", "SIGKILL"))


@pytest.mark.parametrize("same_messages", [True, False])
def test_every_bully_legend_entry_is_a_line_you_can_see(tmp_path, monkeypatch, same_messages):
    """The three series often send the same messages: three lines one over another showed one
    line for three legend entries. Now they are one line that says so."""
    rows = [election(where, how, n, 0.001 * (k + 1) * n, (n - 2) + (0 if same_messages else k))
            for k, (where, how) in enumerate(SERIES) for n in (5, 10, 25)]
    fig = keep_figure(lambda plt: report_bully._bully_plot(rows, tmp_path / "bully.png", plt),
                      monkeypatch)
    try:
        left, right = fig.axes
        assert hidden_legend_entries(left) == hidden_legend_entries(right) == []
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        drawn = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
        assert sorted(legend) == sorted(set(lab for lab in drawn if not lab.startswith("_")))
        merged = [lab for lab in legend if "same counts" in lab]
        assert len(merged) == (1 if same_messages else 0)
        assert len(right.get_lines()) == (2 if same_messages else 4)  # with the textbook's
        # every point's figure written by it, on both panels
        assert {t.get_text() for t in left.texts} >= {"5.00 ms", "20.0 ms", "75.0 ms"}
        assert {t.get_text() for t in right.texts} >= {"3", "8", "23", "10", "45", "300"}
        assert overlapping_texts(fig) == []
    finally:
        plt.close(fig)


def test_bully_series_are_each_ones_newest_commit_in_a_fixed_order():
    rows = [election("processes", "SIGKILL", 5, 0.003, 3),
            election("simulator", "kill", 10, 0.001, 8),
            election("simulator", "kill", 5, 0.001, 3),
            dict(election("simulator", "kill", 5, 0.002, 3, commit="c0"),
                 time=T0 - datetime.timedelta(days=1))]
    series = report_bully.bully_election_series(rows)
    assert list(series) == [("simulator", "kill"), ("processes", "SIGKILL")]
    assert [(r["nodes"], r["commit"]) for r in series[("simulator", "kill")]] == [
        (5, "c1"), (10, "c1")]


def swarm_phase(phase, nodes, loss=0.0, get=10000.0, conns=5000.0):
    r = dict(nodes=nodes, bootstraps=3, loss=loss, target_direct=16, capacity=4096,
             max_known=4096, commit="c1", time=T0, seconds=20.0, fastest_s=19.0, slowest_s=22.0,
             converged=1.0, runs=1, get_connections_per_node=10.0, connections_per_node=5.0,
             get_connections_bytes_per_node=get, connections_bytes_per_node=conns)
    if phase == "crash":
        r["crashed"] = nodes // 5
    return r


def swarm_figure(tmp_path, monkeypatch, joins, crashes):
    data = {"swarm_joins": joins, "swarm_recoveries": crashes}
    return keep_figure(lambda plt: report_swarm._swarm_plot(data, tmp_path / "swarm.png", plt),
                       monkeypatch)


def test_swarm_bytes_of_one_swarm_size_are_bars_with_their_figures(tmp_path, monkeypatch):
    """One swarm size: four dots in one column, join and recovery alike, said nothing. Now bars
    per phase, each with its figure."""
    fig = swarm_figure(tmp_path, monkeypatch, [swarm_phase("join", 10000, get=16413.0)],
                       [swarm_phase("crash", 10000, get=10034.0, conns=4619.0)])
    try:
        traffic = fig.axes[1]
        assert "bytes" in traffic.get_ylabel()
        heights = sorted(round(p.get_height()) for p in traffic.patches)
        assert heights == [4619, 5000, 10034, 16413]
        assert {"16,413", "5,000", "10,034", "4,619"} <= {t.get_text() for t in traffic.texts}
        ticks = [t.get_text() for t in traffic.get_xticklabels()]
        assert ticks[0].startswith("join") and ticks[1].startswith("recovery from crashing 20 %")
        assert "10,000 nodes" in traffic.get_xlabel()
        assert len(traffic.get_legend().get_texts()) == 2  # GetConnections, Connections
        assert bars_on_log_axes(fig) == []
        assert overlapping_texts(fig) == []
    finally:
        plt.close(fig)


def test_swarm_series_of_one_point_say_whether_join_or_recovery(tmp_path, monkeypatch):
    """Join and recovery differ by line style only: a series of one point (1 % lost, one size)
    drew the same square for both."""
    joins = [swarm_phase("join", n) for n in (100, 1000, 10000)] + [
        swarm_phase("join", 400, loss=0.01, get=17000.0)]
    crashes = [swarm_phase("crash", n, get=15000.0, conns=2000.0) for n in (100, 1000, 10000)] + [
        swarm_phase("crash", 400, loss=0.01, get=2500.0, conns=500.0)]
    fig = swarm_figure(tmp_path, monkeypatch, joins, crashes)
    try:
        took, traffic = fig.axes[:2]
        assert traffic.get_xscale() == "log" and len(traffic.patches) == 0
        assert hidden_legend_entries(traffic) == []
        labels = [t.get_text() for t in traffic.get_legend().get_texts()]
        assert len(labels) == 8 and any("(1 % lost)" in lab for lab in labels)
    finally:
        plt.close(fig)


# ---- every picture report._plots draws -------------------------------------------------------

EVERY_PLOT = ("throughput.png", "ratios.png", "latency.png", "headline.png", "bully.png",
              "bully-sync.png", "potato.png", "potato-mesh.png", "swarm.png",
              "latency-rates.png", "failover.png")


def rate_point(system, rate, p99, subscribers=4, lossy=False, interval=0.0):
    """A latency_at_rates row: p99 spanning 0.1 to 40 ms as in docs/bench's records."""
    return dict(scenario=f"S=16 N={subscribers} P=1", payload=16, subscribers=subscribers,
                publishers=1, system=system, offered_rate=float(rate),
                publish_interval_s=interval, commit="c1", time=T0, trials=5,
                lossless_trials=1 if lossy else 5, p50_us=p99 / 4, p50_us_min=p99 / 5,
                p50_us_max=p99 / 3, p99_us=p99, p99_us_min=p99 / 2, p99_us_max=p99 * 2,
                max_us=p99 * 5, max_us_min=p99 * 4, max_us_max=p99 * 8,
                delivered_rate=subscribers * rate, stalled_ms=3.0, worst_lossless_loss=0.0,
                loss=0.6 if lossy else 0.0, client_bound=rate >= 1e6, lossy=lossy)


def sync(where, method, spread, max_error=None, right_after=None):
    return dict(where=where, method=method, nodes=25, commit="c1", time=T0,
                start_spread_s=3600.0 if where == "simulator" else 15.0, spread_ms=spread,
                mean_error_ms=None if max_error is None else max_error / 2,
                max_abs_error_ms=max_error, spread_right_after_ms=right_after,
                outliers=None, unanswered=None, runs=5)


def potato_rows(loss, partition, elected_ms):
    key = dict(nodes=1000, degree=6.0, loss=loss, partition=partition, commit="c1", time=T0,
               runs=3)
    broadcast = dict(key, reached=1.0, reached_of_reachable=1.0, worst_reached_of_reachable=1.0,
                     messages=5001.0, rmr=4.0, last_hops=6.0, latency_p50_ms=4.9,
                     latency_p99_ms=6.4, rmr_goal=5.0)
    election = dict(key, elected_ms=elected_ms, slowest_elected_ms=elected_ms * 1.1,
                    messages=10002.0, messages_per_edge=3.3, counted_share=1.0,
                    worst_counted_share=1.0, counted_once=1.0, won=1.0, took_frame=None)
    return broadcast, election


def every_table():
    """Every table report._plots draws from, shaped like docs/bench's records: figures spanning
    decades where those do (clock sync from 0.5 ms to 144 s, election times from 15 to 292 ms)."""
    data = rows()
    data["bully_elections"] = [election(where, how, n, 0.001 * (k + 1) * n, n - 2)
                               for k, (where, how) in enumerate(SERIES) for n in (5, 10, 25)]
    data["bully_sync"] = [sync("simulator", "berkeley", 1.02, max_error=0.88),
                          sync("simulator", "rtt-blind average", 10.0, max_error=144000.0),
                          sync("processes", "berkeley", 0.56, right_after=0.56)]
    potato = [potato_rows(0.0, False, 15.2), potato_rows(0.01, False, 292.0),
              potato_rows(0.0, True, 22.8)]
    data["potato_broadcasts"] = [b for b, _ in potato]
    data["potato_elections"] = [e for _, e in potato]
    data["potato_meshes"] = [
        dict(mesh=mesh, transport=transport, nodes=nodes, edges=edges, commit="c1", time=T0,
             setup_s=2.5 * nodes / 7, election_p50_ms=8.0, election_p99_ms=12.0,
             cpu_us_per_delivery=700.0, elections=40, runs=2)
        for mesh, nodes, edges in (("A-G", 7, 9), ("20 clients", 20, 40))
        for transport in ("webrtc", "tcp")]
    data["swarm_joins"] = [swarm_phase("join", n) for n in (100, 1000, 10000)]
    data["swarm_recoveries"] = [swarm_phase("crash", n) for n in (100, 1000, 10000)]
    data["swarm_bench"] = [dict(measure=measure, stack=stack, commit="c1", time=T0, value=value,
                                connections=connections, runs=1)
                           for measure, connections, values in (
                               ("memory", 100000, (301.4, 60.2)),
                               ("pingpong", 2000, (68739.0, 75322.0)))
                           for stack, value in zip(("pure Python", "Cython"), values)]
    data["swarm_speedups"] = [dict(measure="memory", commit="c1", time=T0, pure=301.4,
                                   cython=60.2, higher_is_better=False, ratio=5.0),
                              dict(measure="pingpong", commit="c1", time=T0, pure=68739.0,
                                   cython=75322.0, higher_is_better=True, ratio=1.1)]
    data["latency_rates"] = (
        [rate_point(system, rate, p99 * (1 + k / 10))
         for k, system in enumerate(("pelotari", "pelotari-plain", "reference", "nats"))
         for rate, p99 in ((1e4, 150.0), (5e4, 300.0), (2e5, 1500.0), (1e6, 4500.0))]
        + [rate_point("pelotari-plain", 1e6, 0.0, lossy=True)]
        + [rate_point("pelotari-packed", rate, 24000.0 + rate, subscribers=10000, interval=0.05)
           for rate in (100, 200, 500, 1000, 2000)])
    data["latency_floor"] = [dict(transport=t, commit="c1", time=T0, trials=5, p50_us=2.0,
                                  p99_us=p99, p99_us_min=p99 - 0.5, p99_us_max=p99 + 0.5)
                             for t, p99 in (("udp", 5.1), ("tcp", 5.9))]
    data["failover_kills"] = [dict(clients=clients, fault="kill", rate=1000.0, subscribers=4,
                                   kill=k, new_active_s=0.06 + k / 100, arrive_s=0.08 + k / 100,
                                   deliver_s=0.09 + k / 100, confirm_s=0.1 + k / 100,
                                   commit="c1", time=T0)
                              for clients in ("pelotari", "floating") for k in range(10)]
    return data


@pytest.fixture(scope="module")
def every_figure(tmp_path_factory):
    """Every figure report._plots draws (what `pelotari trend` writes), kept open."""
    kept = []
    close = plt.close
    plt.close = lambda fig=None: kept.append(fig)
    try:
        paths = report._plots(every_table(), tmp_path_factory.mktemp("trend"))
    finally:
        plt.close = close
    yield {p.name: fig for p, fig in zip(paths, kept)}
    for fig in kept:
        close(fig)


def test_every_plot_is_drawn(every_figure):
    """A picture report._plots draws but EVERY_PLOT leaves out would escape the checks below."""
    assert sorted(every_figure) == sorted(EVERY_PLOT)


@pytest.mark.parametrize("name", EVERY_PLOT)
def test_no_picture_draws_bars_on_a_log_axis(every_figure, name):
    """On a log axis a bar's length says nothing (but a ratio's bar from 1.0): points there,
    or bars on a linear axis."""
    assert bars_on_log_axes(every_figure[name]) == []


@pytest.mark.parametrize("name", EVERY_PLOT)
def test_no_text_over_text(every_figure, name):
    assert overlapping_texts(every_figure[name]) == []


def test_bully_sync_is_points_with_their_figures(every_figure):
    fig = every_figure["bully-sync.png"]
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert sorted(round(y, 2) for _, y, _ in marker_points(ax)) == [
        0.56, 0.56, 0.88, 1.02, 10.0, 144000.0]  # every measure of every configuration
    assert {"0.56 ms", "0.88 ms", "1.02 ms", "10.0 ms", "144 s"} <= {t.get_text()
                                                                      for t in ax.texts}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 4 and legend[-1].startswith("goal")  # three measures and the goal
    assert "per point" in ax.get_title()


def test_potato_election_time_is_bars_on_a_linear_axis_from_zero(every_figure):
    took = every_figure["potato.png"].axes[3]
    assert "Election" in took.get_title() and "ms" in took.get_ylabel()
    assert took.get_yscale() == "linear" and took.get_ylim()[0] == 0
    assert sorted(round(p.get_height(), 1) for p in took.patches) == [15.2, 22.8, 292.0]
    assert took.get_ylim()[1] > 300  # the deadline's line in view
