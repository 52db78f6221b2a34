"""The load generator's accounting (gaps, duplicates, reordering, latency) on known inputs,
and its publisher/subscriber loops against a real backbone."""
import contextlib
import threading

import pytest

from conftest import compiled_tool

# No twin: the load generator is a benchmark tool whose figures are those of the compiled path.
loadgen = compiled_tool("loadgen")
LatencyHistogram, StreamCounter, stamp = loadgen.LatencyHistogram, loadgen.StreamCounter, loadgen.stamp
publish_fyrehose, subscribe_fyrehose = loadgen.publish_fyrehose, loadgen.subscribe_fyrehose


def test_payload_stamp_layout():
    assert stamp(3, 0x0102030405, 0x1122334455667788, 20) == (
        b"\x00\x03" + b"\x00\x01\x02\x03\x04\x05" + bytes.fromhex("1122334455667788") + b"\0" * 4)
    with pytest.raises(ValueError):
        stamp(0, 0, 0, 15)


def test_histogram_small_values_are_exact_and_large_ones_within_a_sixteenth():
    h = LatencyHistogram()
    for v in range(1, 11):
        h.record(v)
    assert (h.quantile(0.5), h.quantile(0.9), h.quantile(1.0), h.total, h.max) == (5, 9, 10, 10, 10)
    h = LatencyHistogram()
    h.record(1000)
    # 1000 = 0b1111101000: bucket [992, 1023] (sub-bucket width 32); the maximum caps it.
    assert h.quantile(0.5) == 1000
    h.record(5000)
    assert h.quantile(0.5) == 1023 and h.quantile(1.0) == 5000


def test_histogram_percentiles_of_a_known_distribution():
    h = LatencyHistogram()
    for v in range(1, 1001):  # 1..1000 ns, one each
        h.record(v * 1000)
    s = h.summary()
    assert s["count"] == 1000 and s["max_ns"] == 1_000_000
    assert s["mean_ns"] == pytest.approx(500_500)
    for q, exact in ((0.5, 500_000), (0.9, 900_000), (0.99, 990_000)):
        got = h.quantile(q)
        assert exact <= got <= exact * (1 + 1 / 16), (q, got)  # never optimistic, <= 6.25% high


def test_histogram_empty_and_bounds():
    h = LatencyHistogram()
    assert h.quantile(0.99) == 0 and h.summary()["max_ns"] == 0
    with pytest.raises(ValueError):
        h.quantile(1.5)


def record(counter, pub, counters, now=1000):
    for c in counters:
        counter.record(stamp(pub, c, 0), now)


def test_counts_unique_duplicates_and_reordering():
    c = StreamCounter()
    record(c, 0, [0, 1, 2, 5, 3, 3, 4, 9, 9, 1])
    s = c.summary()
    # unique 0,1,2,3,4,5,9; duplicates: 3, 9, 1; reordered: 3 and 4 arrived after 5.
    assert (s["unique"], s["duplicates"], s["reordered"]) == (7, 3, 2)
    assert s["publishers"][0] == {"unique": 7, "highest": 9, "missing_below_highest": 3}


def test_publishers_are_counted_separately_and_foreign_payloads_flagged():
    c = StreamCounter()
    record(c, 0, [0, 1, 2])
    record(c, 5, [0, 2])
    c.record(stamp(64, 0, 0), 1)  # PUB_ID past the maximum
    assert c.record(b"short", 1) == -1
    s = c.summary()
    assert s["unique"] == 5 and s["foreign"] == 2
    assert s["publishers"][5]["missing_below_highest"] == 1


def test_window_slots_are_reused_correctly_at_the_window_boundary():
    window = 65536
    c = StreamCounter()
    record(c, 1, range(10))                    # 0..9
    record(c, 1, [window + 4])                 # slots of 0..4 now stand for window..window+4
    record(c, 1, [window + 1])                 # arrived late, not a duplicate of 1
    record(c, 1, [5])                          # 5 is still inside the window: a duplicate
    record(c, 1, [3])                          # window + 4 - 3 > window: too old to check
    s = c.summary()
    assert (s["unique"], s["duplicates"], s["reordered"], s["too_old"]) == (13, 1, 2, 1)


def test_latency_is_measured_from_the_stamp():
    c = StreamCounter()
    c.record(stamp(0, 0, 1_000), 3_000)
    c.record(stamp(0, 1, 1_000), 11_000)
    lat = c.summary()["latency"]
    assert lat["count"] == 2 and lat["max_ns"] == 10_000 and lat["mean_ns"] == 6_000


def subscribing(port, wait=5.0, **kw):
    """subscribe_fyrehose in a thread, returned once its sockets are signed on: (the thread,
    the dict its result will fill)."""
    result, ready = {}, threading.Event()
    t = threading.Thread(target=lambda: result.update(subscribe_fyrehose(
        "127.0.0.1", port, ready=ready.set, max_duration=60, **kw)))
    t.start()
    assert ready.wait(wait)
    return t, result


def test_publisher_and_subscribers_against_a_live_backbone(backbone):
    port = backbone.address[1]
    t, result = subscribing(port, subscribers=3, idle=3.0)
    pubs = [publish_fyrehose("127.0.0.1", port, payload_size=64, count=500, duration=10,
                             pub_id=i) for i in range(2)]
    t.join()
    assert [p["sent"] for p in pubs] == [500, 500]
    assert result["unique"] == 3 * 1000 and result["duplicates"] == 0
    for sub in result["subscribers"]:
        assert {p: v["unique"] for p, v in sub["publishers"].items()} == {0: 500, 1: 500}
    assert backbone.stats()["pushes"] == 1000


@pytest.mark.parametrize("gro", [False, True])
def test_gro_subscribers_read_gso_runs_whole_and_split_them(held_backbone, gro):
    bb = held_backbone(gso=True)
    port = bb.address[1]
    bb.release()
    t, result = subscribing(port, wait=30, subscribers=2, idle=3.0, gro=gro)
    # Two bursts of 64 wait in the paused backbone's socket, so its first receive batches hold
    # 64 PUSHes each and it sends runs of DELIVERs with UDP GSO; the rest go to a running loop.
    bb.pause()
    publish_fyrehose("127.0.0.1", port, payload_size=100, count=128, duration=10, batch=64)
    bb.release()
    publish_fyrehose("127.0.0.1", port, payload_size=100, count=2872, duration=10, batch=64,
                     pub_id=1)
    t.join()
    assert bb.stats()["gso_sends"] > 0
    assert result["unique"] == 2 * 3000 and result["duplicates"] == 0
    # Each DELIVER is one datagram on the wire; the others are the KEEPALIVE-ACKs.
    assert result["frames"] == result["datagrams"] - result["other_datagrams"] == 2 * 3000
    if gro:
        assert result["reads"] < result["datagrams"]  # runs arrived whole, split at the segment size
    else:
        assert result["reads"] == result["datagrams"]


@pytest.mark.slow  # 1,500 sockets signed on, 30,000 DELIVERs
def test_a_group_past_a_thousand_sockets_counts_every_subscriber(backbone_factory):
    # epoll over 1,500 sockets (poll() scanned them all at every wake-up), and the group's
    # keepalives spread over half a second instead of 1,500 sends at once
    from pelotari.harness.agent import open_files

    open_files(1_500 + 64)
    bb = backbone_factory(max_subscribers=2_000, max_per_address=0)
    port = bb.address[1]
    t, result = subscribing(port, wait=30, subscribers=1_500, idle=3.0, timeline=0.01)
    publish_fyrehose("127.0.0.1", port, payload_size=16, count=20, duration=10)
    t.join()
    assert result["unique"] == 1_500 * 20 and result["duplicates"] == 0
    assert all(sub["unique"] == 20 for sub in result["subscribers"])
    # the timeline's worst slice is the trial's worst message (both from the same stamps)
    assert max(result["timeline_worst_ns"]) == result["latency"]["max_ns"] > 0


def test_the_largest_group_opens_and_one_more_is_refused():
    from pelotari.harness.agent import open_files
    from pelotari.harness.systems import MAX_SUBSCRIBERS as BENCH_TABLE

    assert loadgen.MAX_SUBSCRIBERS == BENCH_TABLE  # the bench backbones' --max-subscribers
    open_files(loadgen.MAX_SUBSCRIBERS + 64)
    group = loadgen.SubscriberGroup("127.0.0.1", 9, loadgen.MAX_SUBSCRIBERS)
    del group  # (closes its sockets)
    with pytest.raises(ValueError, match="subscribers must be within"):
        loadgen.SubscriberGroup("127.0.0.1", 9, loadgen.MAX_SUBSCRIBERS + 1)


def test_a_timeline_keeps_one_worst_latency_per_slice(backbone):
    port = backbone.address[1]
    t, result = subscribing(port, subscribers=2, idle=1.0)
    publish_fyrehose("127.0.0.1", port, payload_size=16, count=100, duration=10)
    t.join()
    assert "timeline_worst_ns" not in result  # only when asked for
    group = loadgen.SubscriberGroup("127.0.0.1", port, 1)
    try:
        group.sign_on()
        for bad in (-1.0, 0.0005):
            with pytest.raises(ValueError, match="timeline"):
                group.measure(1.0, 0.1, bad)
        got = group.measure(0.2, 0.1, 0.001)  # nothing arrives: an empty timeline
        assert got["timeline_worst_ns"] == [] and got["timeline_s"] == 0.001
    finally:
        group.sign_off()


def test_a_publisher_with_an_interval_sends_at_most_once_per_interval(backbone):
    port = backbone.address[1]
    paced = publish_fyrehose("127.0.0.1", port, rate=1000, duration=0.5, interval=0.1,
                             pack=65507, max_frames=1024)
    # at most one pack per 0.1 s (the first at once), each holding what was due by then
    assert paced["datagrams"] <= 6 and 100 <= paced["sent"] <= 501
    each = publish_fyrehose("127.0.0.1", port, rate=1000, duration=0.5, pack=65507,
                            max_frames=1024)
    # without: each message leaves when it is due (over 20 sends even if every nap of the
    # publisher took 25 ms, on a machine far slower than ours)
    assert each["datagrams"] > 20
    with socket_sink() as sink:  # without packs: every message due by a tick goes at it
        plain = publish_fyrehose("127.0.0.1", sink, rate=5000, duration=0.5, interval=0.05)
    assert 2000 <= plain["sent"] <= 2501
    for bad in (-0.1, 10.5):
        with pytest.raises(ValueError, match="interval"):
            publish_fyrehose("127.0.0.1", port, rate=1000, duration=0.1, interval=bad)


def test_deliveries_from_a_stranger_are_counted_never_believed(backbone):
    # Well-formed DELIVERs with the load generator's own stamps, sent to the subscribers by a
    # socket that is not the backbone, and zero-length ones; and through the backbone, frames
    # of a publisher id no load generator uses. None is a message, none is a latency.
    import socket

    port = backbone.address[1]
    group = loadgen.SubscriberGroup("127.0.0.1", port, 2)
    forged = [bytes([1, 0, 16]) + (1000 + k).to_bytes(6, "big") + stamp(0, k, 0)
              for k in range(50)] + [bytes([1, 0, 0]) + bytes(6)] * 5
    outsider = bytes([2, 0, 16]) + bytes(6) + stamp(99, 0, 0)  # a PUSH from publisher 99

    def ready():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
            stranger.bind(("127.0.0.1", 0))
            for host_port in group.addresses():
                for datagram in forged:
                    stranger.sendto(datagram, host_port)
            stranger.sendto(outsider, ("127.0.0.1", port))
        publish_fyrehose("127.0.0.1", port, payload_size=16, count=10, duration=10)

    try:
        group.sign_on()
        got = group.measure(30.0, 1.0, 0.001, ready=ready)
    finally:
        group.sign_off()
    assert got["unique"] == 2 * 10 and got["duplicates"] == 0 and got["frames"] == 2 * 10
    assert got["other_datagrams"] >= 2 * (len(forged) + 1)  # (and the KEEPALIVE-ACKs)
    assert got["latency"]["max_ns"] < 10e9 > max(got["timeline_worst_ns"])  # not `now - 0`


def test_open_files_raises_the_soft_limit_or_says_why_not():
    import resource

    from pelotari.harness.agent import open_files

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_files(soft)  # already enough: unchanged
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)
    if hard != resource.RLIM_INFINITY and hard > soft:
        try:
            open_files(soft + 1)
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft + 1
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def socket_sink():
    """A bound UDP socket nobody reads: its port."""
    import socket

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    try:
        yield sink.getsockname()[1]
    finally:
        sink.close()


def test_paced_publisher_sends_rate_times_duration():
    import socket

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    try:
        res = publish_fyrehose("127.0.0.1", sink.getsockname()[1], rate=2000, duration=0.5)
    finally:
        sink.close()
    # Pacing never bursts ahead of the rate (the upper bound is the point); a publisher
    # descheduled near its deadline may legitimately send a little less.
    assert 900 <= res["sent"] <= 1001


def test_loadgen_arguments_are_validated():
    for kw in ({"payload_size": 15}, {"payload_size": 65499}, {"pub_id": 64}, {"batch": 0}):
        with pytest.raises(ValueError):
            publish_fyrehose("127.0.0.1", 9, **kw)
    with pytest.raises(ValueError):
        subscribe_fyrehose("127.0.0.1", 9, subscribers=0)



def _closed_on_failure(fn, *args, **kw):
    """Call fn expecting OSError; whether every socket it opened was closed, not left to GC."""
    import gc
    import warnings

    import psutil
    before = psutil.Process().num_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(OSError):  # inet_aton refuses the host after the sockets exist
            fn(*args, **kw)
        gc.collect()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
    return not unclosed and psutil.Process().num_fds() == before


def test_publisher_closes_its_socket_when_setup_fails():
    assert _closed_on_failure(publish_fyrehose, "not-an-address", 9, duration=0.01)


def test_subscriber_group_closes_its_sockets_when_setup_fails():
    from fastpath.loadgen import SubscriberGroup
    assert _closed_on_failure(SubscriberGroup, "not-an-address", 9, subscribers=3)

def test_send_arena_frees_what_it_allocated_when_an_allocation_fails():
    import gc
    import tracemalloc

    from fastpath.loadgen import _SendArena
    _SendArena(64, 1500)  # one that succeeds, so first-use allocations are not counted below
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            with pytest.raises(MemoryError):
                _SendArena(64, 1 << 60)  # the arena fails, the headers and iovecs do not
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024  # a leak would be 2000 x 64 x (64 + 16) bytes = 10 MB
