"""`--metrics` as an operator uses it: a live backbone process scraped by a real Prometheus
server, and its /status view of the subscriber table."""
import json
import re
import signal
import socket
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import PELOTARI, wait_for
from prom import Prometheus

pytestmark = pytest.mark.e2e


def start_backbone(*extra):
    """A `pelotari backbone --metrics 127.0.0.1:0` process: (proc, udp port, metrics URL)."""
    proc = subprocess.Popen(PELOTARI + ["backbone", "--host", "127.0.0.1", "--port", "0",
                                        "--metrics", "127.0.0.1:0", *extra],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()
    second = proc.stderr.readline()
    assert "listening on 127.0.0.1:" in first, first + second
    port = int(first.split("127.0.0.1:")[1].split("/")[0])
    found = re.search(r"metrics at (http://127\.0\.0\.1:\d+)/metrics", second)
    assert found, second
    return proc, port, found.group(1)


def scrape(url):
    """{sample name + labels: value} from a /metrics page."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as answer:
        text = answer.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out


def publish(port, count):
    from pelotari.fyrehose import Client

    with Client(("127.0.0.1", port)) as client:
        for i in range(count):
            client.publish(b"m%d" % i, timeout=5)


def stop(proc):
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(10)
    err = proc.stderr.read()
    assert "Traceback" not in err, err
    return rc, err


def test_a_real_prometheus_scrapes_a_live_backbone(tmp_path):
    proc, port, url = start_backbone()
    try:
        publish(port, 7)
        target = url.split("//")[1]
        with Prometheus(tmp_path, [target]) as prom:
            prom.wait(lambda: prom.targets_health().get(url + "/metrics") == "up", 30,
                      "the backbone target to be up")
            pushes = prom.wait(lambda: prom.query("pelotari_fyrehose_pushes_total"), 30,
                               "a scrape holding pelotari_fyrehose_pushes_total")
            assert [value for _, value in pushes] == [7.0]
            dropped = prom.wait(
                lambda: prom.query('pelotari_fyrehose_drops_total{reason="unknown_type"}'), 30,
                "the drops family")
            assert [value for _, value in dropped] == [0.0]
            # More traffic shows up in a later scrape: the exporter reads live counters.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"\x7fgarbage", ("127.0.0.1", port))
            prom.wait(lambda: [v for _, v in prom.query(
                'pelotari_fyrehose_drops_total{reason="unknown_type"}')] == [1.0], 30,
                "the dropped datagram in Prometheus")
    finally:
        rc, err = stop(proc)
    assert rc == 130, err  # Ctrl-C's status
    assert "dropped unknown_type 1" in err


def test_status_shows_each_subscriber_with_its_counters_and_ctrl_c_stops_everything():
    from pelotari.fyrehose import Client
    from pelotari.fyrehose.codec import NOJOURNAL

    proc, port, url = start_backbone()
    try:
        with Client(("127.0.0.1", port)) as reader, \
                Client(("127.0.0.1", port), flags=NOJOURNAL) as writer:
            assert reader.wait_connected(5) and writer.wait_connected(5)
            for i in range(5):
                writer.publish(b"m%d" % i, timeout=5)
            assert wait_for(lambda: scrape(url)["pelotari_fyrehose_delivers_total"] == 10, 10)
            with urllib.request.urlopen(url + "/status?sort=keepalives&order=asc", timeout=5) as a:
                status = json.loads(a.read())
            with urllib.request.urlopen(url + "/status?limit=1", timeout=5) as a:
                one = json.loads(a.read())
        assert status["pushes"] == 5 and status["total"] == 2 and len(status["entries"]) == 2
        assert one["total"] == 2 and len(one["entries"]) == 1
        by_flags = {tuple(e["flags"]): e for e in status["entries"]}
        assert set(by_flags) == {(), ("NOJOURNAL",)}
        for entry in by_flags.values():
            assert entry["delivered"] == 5 and entry["datagrams"] == 5
            assert entry["keepalives"] >= 1 and entry["requested"] == 0
            assert entry["address"].startswith("127.0.0.1:") and entry["seconds_left"] > 0
        keepalives = [e["keepalives"] for e in status["entries"]]
        assert keepalives == sorted(keepalives)
        metrics = scrape(url)
        assert metrics["pelotari_fyrehose_pushes_total"] == 5
        assert metrics["pelotari_fyrehose_subscribers"] == 2
        assert metrics["pelotari_fyrehose_journaling_subscribers"] == 1
        assert "process_resident_memory_bytes" in metrics
        batches = metrics["pelotari_fyrehose_receive_batches_total"]
        assert metrics["pelotari_fyrehose_receive_batch_size_count"] == batches > 0
        assert metrics["pelotari_fyrehose_receive_batch_size_bucket{le=+Inf}"] == batches
        assert (metrics["pelotari_fyrehose_receive_batch_size_sum"]
                == metrics["pelotari_fyrehose_datagrams_received_total"])
    finally:
        rc, err = stop(proc)
    assert rc == 130, err  # Ctrl-C's status
    with pytest.raises(OSError):  # the metrics port closed with the process
        urllib.request.urlopen(url + "/metrics", timeout=2)


@pytest.mark.parametrize("value, needle", [
    ("nohost.invalid:9", "cannot resolve host"), ("127.0.0.1:70000", "port 70000 outside"),
    ("-1", "'-1': port -1 outside"), ("[::1]:9466", "listens on IPv4"),
])
def test_a_bad_metrics_address_is_one_line(value, needle):
    done = subprocess.run(PELOTARI + ["backbone", "--host", "127.0.0.1", "--port", "0",
                                      "--metrics", value],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr


def test_a_metrics_port_in_use_is_one_line_and_leaves_nothing_running():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = subprocess.run(PELOTARI + ["backbone", "--host", "127.0.0.1", "--port", "0",
                                          "--metrics", f"127.0.0.1:{busy}"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30)
    assert done.returncode == 1, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{busy}" in done.stderr
    assert "Traceback" not in done.stderr
