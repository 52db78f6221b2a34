"""pelotari.metrics, the server behind every `--metrics`: exposition, the /status view and its
limits (at and one past), and the bounds a stranger meets (connections, per host, time)."""
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_for
from pelotari import metrics as m


class Source:
    def __init__(self, n=5):
        self.n = n

    def collect(self):
        yield m.counter("pelotari_test_things", "Things.", 3)
        yield m.counters_by("pelotari_test_drops", "Drops.", "reason", {"a": 1, "b": 2})
        yield m.gauge("pelotari_test_level", "Level.", 5)
        yield m.gauges_by("pelotari_test_links", "Links.", "status", {"up": 2, "down": 0})
        yield m.histogram("pelotari_test_size", "Size.", [(1, 1), (10, 3), (float("inf"), 4)],
                          25.0)
        yield from m.stats_families("pelotari_test_node_", {"dropped_bad": 2, "hellos": 7})

    def status(self):
        return {"role": "test", "entries": [{"k": i, "v": -i} for i in range(self.n)]}


@pytest.fixture
def server():
    with m.MetricsServer(Source(), request_timeout=0.5) as s:
        yield s


def get(url):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read()


def test_metrics_parse_as_prometheus_parses_them(server):
    code, ctype, body = get(server.url + "/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert samples[("pelotari_test_things_total", ())] == 3
    assert samples[("pelotari_test_drops_total", (("reason", "b"),))] == 2
    assert samples[("pelotari_test_level", ())] == 5
    assert samples[("pelotari_test_links", (("status", "down"),))] == 0
    assert samples[("pelotari_test_size_bucket", (("le", "10.0"),))] == 3
    assert samples[("pelotari_test_size_count", ())] == 4
    assert samples[("pelotari_test_node_drops_total", (("reason", "bad"),))] == 2
    assert samples[("pelotari_test_node_hellos_total", ())] == 7
    assert ("process_resident_memory_bytes", ()) in samples


def test_a_histogram_must_end_at_infinity():
    with pytest.raises(ValueError):
        m.histogram("x", "x", [(1, 1)], 1.0)


def test_status_sorts_pages_and_caps(server):
    base = server.url + "/status"
    got = json.loads(get(base)[2])
    assert got["role"] == "test" and got["total"] == 5 and [e["k"] for e in got["entries"]] == list(range(5))
    got = json.loads(get(base + "?sort=k&limit=2&offset=1")[2])
    assert [e["k"] for e in got["entries"]] == [3, 2]  # numbers high first
    got = json.loads(get(base + "?sort=v&order=asc&limit=1")[2])
    assert [e["k"] for e in got["entries"]] == [4]


def test_status_sorts_lists_text_and_missing_values_without_failing():
    entries = [{"k": 1, "flags": ["B"]}, {"k": 2, "flags": []}, {"k": 3, "flags": None},
               {"k": 4, "flags": ["A", "B"]}]
    got = m.page(entries, {"sort": ["flags"], "order": ["asc"]})
    assert [e["k"] for e in got["entries"]] == [4, 1, 2, 3]  # by text; the missing one last
    got = m.page(entries, {"sort": ["flags"]})
    assert [e["k"] for e in got["entries"]][-1] == 3


def test_status_limit_at_and_one_past_the_cap():
    with m.MetricsServer(Source(m.MAX_LIMIT + 1)) as s:
        at = json.loads(get(s.url + f"/status?limit={m.MAX_LIMIT}")[2])
        past = json.loads(get(s.url + f"/status?limit={m.MAX_LIMIT + 1}")[2])
    assert len(at["entries"]) == m.MAX_LIMIT and at["limit"] == m.MAX_LIMIT
    assert len(past["entries"]) == m.MAX_LIMIT and past["limit"] == m.MAX_LIMIT
    assert past["total"] == m.MAX_LIMIT + 1


@pytest.mark.parametrize("query, needle", [
    ("sort=nope", "no field 'nope'"), ("limit=x", "whole numbers"), ("offset=-1", "not negative"),
    ("order=up", "asc or desc"),
])
def test_bad_status_queries_are_400_with_a_reason(server, query, needle):
    with pytest.raises(urllib.error.HTTPError) as err:
        get(server.url + "/status?" + query)
    assert err.value.code == 400 and needle in err.value.read().decode()


def test_unknown_paths_are_404_and_head_answers(server):
    with pytest.raises(urllib.error.HTTPError) as err:
        get(server.url + "/secret")
    assert err.value.code == 404
    request = urllib.request.Request(server.url + "/metrics", method="HEAD")
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200 and answer.read() == b""
    assert b"/metrics" in get(server.url + "/")[2]


def connect(server, source="127.0.0.1"):
    s = socket.create_connection(server.address, timeout=5, source_address=(source, 0))
    return s


def test_one_host_holds_at_most_its_share_and_another_host_still_gets_in():
    # (a request timeout far past the test: held connections are cut by the newcomer alone)
    with m.MetricsServer(Source(), request_timeout=60) as server:
        held_one_hosts_share(server)


def held_one_hosts_share(server):
    held = [connect(server) for _ in range(m.PER_HOST_CONNECTIONS)]
    try:
        assert wait_for(lambda: sum(server._server.active.values()) == m.PER_HOST_CONNECTIONS, 30)
        # One past: the host's own oldest is cut, the newest served (a scraper's next request
        # while its last one's thread is still finishing).
        extra = connect(server)
        extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: extra.recv(65536), b""))
        assert reply.startswith(b"HTTP/1.0 200")
        extra.close()
        assert held[0].recv(100) == b"" and server.evicted == 1 and server.refused == 0
        assert sum(server._server.active.values()) <= m.PER_HOST_CONNECTIONS
        other = connect(server, "127.0.0.2")  # a scraper elsewhere is not locked out
        other.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: other.recv(65536), b""))
        assert reply.startswith(b"HTTP/1.0 200")
        other.close()
    finally:
        for s in held:
            s.close()


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_at_most_max_connections_at_once_and_a_new_host_still_gets_in():
    # Strangers holding every connection from four addresses (before: a scraper on a fifth
    # was closed unanswered for as long as they kept reconnecting).
    with m.MetricsServer(Source(), request_timeout=60) as server:
        held = [connect(server, f"127.0.0.{2 + k // m.PER_HOST_CONNECTIONS}")
                for k in range(m.MAX_CONNECTIONS)]
        try:
            assert wait_for(lambda: sum(server._server.active.values()) == m.MAX_CONNECTIONS, 30)
            again = connect(server, "127.0.0.3")  # a host that holds its share: its own oldest
            held.append(again)
            assert wait_for(lambda: server.evicted == 1, 30)  # makes room, nobody else's
            assert held[2].recv(100) == b""
            assert server.refused == 0
            scraper = connect(server, "127.0.0.200")
            scraper.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            reply = b"".join(iter(lambda: scraper.recv(65536), b""))
            scraper.close()
            assert reply.startswith(b"HTTP/1.0 200")
            assert server.evicted == 2 and held[0].recv(100) == b""  # the oldest of the busiest
            assert sum(server._server.active.values()) <= m.MAX_CONNECTIONS
        finally:
            for s in held:
                s.close()
        assert wait_for(lambda: not server._server.active and not server._server.cut, 30)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_host_under_its_share_is_refused_when_all_are_taken():
    server = m.MetricsServer(Source(), request_timeout=60).start()
    sources = ["127.0.0.2"] * 2 + ["127.0.0.3"] * 2 + ["127.0.0.4"] * 2 + ["127.0.0.5",
                                                                            "127.0.0.6"]
    assert len(sources) == m.MAX_CONNECTIONS
    held = [connect(server, source) for source in sources]
    try:
        assert wait_for(lambda: sum(server._server.active.values()) == m.MAX_CONNECTIONS, 30)
        extra = connect(server, "127.0.0.5")  # holds one: neither its own to cut nor room
        assert extra.recv(100) == b""
        extra.close()
        assert server.refused == 1 and server.evicted == 0
    finally:
        for s in held:
            s.close()
        server.stop()


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_client_that_dribbles_is_cut_after_the_request_timeout(server):
    s = connect(server)
    started = time.monotonic()
    try:
        s.sendall(b"GET /met")  # and never the rest
        for _ in range(20):
            try:
                s.sendall(b"r")
            except OSError:
                break
            time.sleep(0.05)
        assert s.recv(100) == b""
    finally:
        s.close()
    assert time.monotonic() - started < 3
    assert wait_for(lambda: not server._server.active, 2)


def test_garbage_requests_are_answered_or_counted_never_printed(server, capfd):
    for junk in (b"\x00\xff" * 100 + b"\r\n\r\n", b"GET " + b"a" * 70000 + b"\r\n\r\n",
                 b"POST /metrics HTTP/1.1\r\n\r\n"):
        s = connect(server)
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: s.recv(65536), b""))
        s.close()
        # An error answer (HTTP/0.9 garbage gets http.server's page without headers): small.
        assert len(reply) < 4096 and b"Traceback" not in reply
    assert get(server.url + "/metrics")[0] == 200
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_an_error_answer_never_quotes_the_request(server):
    # http.server's error page quoted a bad request line back: 3,018 bytes in, 3,364 out.
    for junk in (b"GET / HTTP/1.1" + b"x" * 3000 + b"\r\n\r\n", b"\x00\xff" * 1000 + b"\r\n\r\n"):
        s = connect(server)
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: s.recv(65536), b""))
        s.close()
        assert 0 < len(reply) <= 256 and b"xxxx" not in reply and b"\\x" not in reply, reply


def test_stop_frees_the_port_and_leaves_no_thread():
    server = m.MetricsServer(Source()).start()
    address = server.address
    server.stop()
    assert not any(t.name == "pelotari-metrics" for t in threading.enumerate())
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(address)


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_busy_loop_fails_the_scrape_not_the_node():
    import asyncio

    loop = asyncio.new_event_loop()  # never run: nothing answers
    try:
        with m.MetricsServer(m.OnLoop(Source(), loop, timeout=0.2)) as server:
            with pytest.raises(urllib.error.HTTPError) as err:
                get(server.url + "/status")
            assert err.value.code == 503
    finally:
        loop.close()


def test_request_timeout_limits():
    with pytest.raises(ValueError):
        m.MetricsServer(Source(), request_timeout=0)
    m.MetricsServer(Source(), request_timeout=3600).stop()
    with pytest.raises(ValueError):
        m.MetricsServer(Source(), request_timeout=3600.5)
