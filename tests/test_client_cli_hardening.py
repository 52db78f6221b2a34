"""Issue 11 finding 6, client side: a bounded receive queue, `pub` that reads every stdin line,
`sub` output no message can forge, close() that ends every reader, clean Ctrl-C. Real
backbones on 127.0.0.1, real `pelotari` processes."""
import asyncio
import base64
import itertools
import json
import re
import signal
import socket
import subprocess
import threading
import time

import psutil
import pytest

from conftest import PELOTARI, wait_for
from pelotari.fyrehose import AsyncClient, Client, Lost, Message, Resync
from pelotari.fyrehose.client import DEFAULT_MAX_QUEUED_BYTES
from pelotari.fyrehose.codec import MAX_DATA, NOJOURNAL, NOSUBSCRIBE
from pelotari.fyrehose.core import ClientConfig

pytestmark = pytest.mark.e2e


def addr(bb):
    return f"127.0.0.1:{bb.address[1]}"


def start(*args, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(PELOTARI + list(args), **kw)


def run(*args, input=b"", timeout=30):
    return subprocess.run(PELOTARI + list(args), input=input, capture_output=True, timeout=timeout,
                          check=False)


def collect(client, n, timeout=5.0):
    """The next n items, or fewer if `timeout` passes with nothing."""
    got = []
    while len(got) < n and (item := client.receive(timeout)) is not None:
        got.append(item)
    return got


def vm_rss_kib(pid):
    return psutil.Process(pid).memory_info().rss // 1024


def sub_process(bb, *extra, **kw):
    """`pelotari sub` against bb, returned once the backbone counts it as a subscriber."""
    before = bb.stats()["subscribers"]
    proc = start("sub", "-b", addr(bb), *extra, **kw)
    assert wait_for(lambda: bb.stats()["subscribers"] > before, 10), "sub never signed on"
    return proc


@pytest.fixture
def publisher(backbone_factory):
    """(backbone, fire-and-forget Client publishing into it)."""
    bb = backbone_factory()
    with Client(addr(bb), flags=NOSUBSCRIBE | NOJOURNAL) as pub:
        assert pub.wait_connected(3)
        yield bb, pub


# ---- 1. a bounded receive queue ------------------------------------------------------------

def test_sub_memory_stays_bounded_when_nobody_reads_its_stdout(publisher):
    """200,000 x 1 KB messages into `pelotari sub` whose stdout pipe nobody reads: before the
    bounded queue its RSS grew ~230 MB; now it stays within the byte limits of what is queued and
    what is held behind gaps, and the drop is reported in the stream, in order, as an overflow loss."""
    bb, pub = publisher
    proc = sub_process(bb, "--json", "--timeout", "3", stdin=subprocess.DEVNULL)
    time.sleep(0.3)
    base = vm_rss_kib(proc.pid)
    peak = base
    pad = b"x" * 992
    started = time.monotonic()
    sent = 0
    # Until the backbone has taken 200,000: a loaded machine drops some PUSHes (fire-and-forget),
    # so the publisher tops them up, at 50k messages/s, for at most two minutes.
    while bb.stats()["pushes"] < 200_000 and time.monotonic() < started + 120:
        for _ in range(50):
            pub.publish_many_nowait([b"%08d" % (sent + i) + pad for i in range(100)])
            sent += 100
            delay = started + sent / 50_000 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        peak = max(peak, vm_rss_kib(proc.pid))
    pushes = [-1]

    def settled():
        pushes.append(bb.stats()["pushes"])
        peak_now.append(vm_rss_kib(proc.pid))
        return pushes[-1] == pushes[-2]
    peak_now = [peak]
    assert wait_for(settled, 30, interval=0.5) and pushes[-1] >= 200_000, pushes[-1]
    peak = max(peak_now)
    out, err = proc.communicate(timeout=120)
    growth_mib = (peak - base) / 1024
    # DATA queued for stdout + DATA held behind gaps, plus half again for the objects around it
    # (116 MiB here under load when the held messages were bounded by count only, ~230 MB
    # before the queue was bounded).
    bound_mib = 1.5 * (DEFAULT_MAX_QUEUED_BYTES + ClientConfig().max_held_bytes) / (1 << 20)
    assert growth_mib < bound_mib, f"sub grew {growth_mib:.0f} MiB with stdout unread"
    records = [json.loads(line) for line in out.splitlines()]
    spans = [(r["sequence"], r["sequence"]) if "sequence" in r else tuple(r["lost"])
             for r in records]
    # every sequence accounted for exactly once, in order: messages and loss notices tile the run
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans)), "out of order or skipped"
    overflow = [r for r in records if r.get("reason") == "overflow"]
    assert overflow, "no overflow loss reported"
    dropped = sum(hi - lo + 1 for lo, hi in (r["lost"] for r in overflow))
    assert dropped >= 100_000
    # The overflow notice also covers sequences the network lost while it was open.
    summary = re.search(r"(\d+) lost, (\d+) dropped unread", err.decode())
    assert summary, err
    lost, unread = int(summary[1]), int(summary[2])
    assert unread <= dropped <= unread + lost, (dropped, unread, lost)


def test_client_with_a_full_queue_drops_the_newest_and_says_so_in_place(publisher):
    bb, pub = publisher
    with Client(addr(bb), max_queued=100) as sub:
        assert sub.wait_connected(3)
        for k in range(0, 1000, 100):
            pub.publish_many_nowait([b"m%d" % i for i in range(k, k + 100)])
            time.sleep(0.01)
        assert wait_for(lambda: sub.stats()["overflow"] == 900, 5), sub.stats()
        assert sub.stats()["queued"] == 100
        items = collect(sub, 102, timeout=1.0)
    seqs = [m.sequence for m in items[:100]]
    pub_seqs = list(range(seqs[0], seqs[0] + 1000))
    assert [m.data for m in items[:100]] == [b"m%d" % i for i in range(100)]
    assert seqs == pub_seqs[:100]
    assert items[100:] == [Lost(pub_seqs[100], pub_seqs[-1], "overflow")]


def test_the_queue_takes_messages_again_once_the_reader_catches_up(publisher):
    bb, pub = publisher
    with Client(addr(bb), max_queued=10) as sub:
        assert sub.wait_connected(3)
        pub.publish_many_nowait([b"a%d" % i for i in range(30)])
        assert wait_for(lambda: sub.stats()["overflow"] == 20, 5)
        first = collect(sub, 6)  # down to half: the overflow notice is queued behind the rest
        pub.publish_many_nowait([b"b%d" % i for i in range(3)])
        time.sleep(0.2)
        rest = collect(sub, 20, timeout=0.5)
    items = first + rest
    base = items[0].sequence
    assert items == ([Message(base + i, b"a%d" % i) for i in range(10)]
                     + [Lost(base + 10, base + 29, "overflow")]
                     + [Message(base + 30 + i, b"b%d" % i) for i in range(3)])


def test_backlog_limits_bytes_and_keeps_at_most_three_notices():
    from pelotari.fyrehose.client import Backlog

    log = Backlog(max_items=100, max_bytes=10)
    assert log.put(Message(1, b"12345678"))
    assert not log.put(Message(2, b"123"))  # 11 bytes would not fit
    assert not log.put(Lost(3, 4))
    assert not log.put(Resync(5, 900))
    assert not log.put(Message(900, b"x"))
    assert not log.put(Resync(901, 5000))
    assert not log.put(Message(5000, b"y"))
    assert log.dropped_messages == 3
    assert [log.get() for _ in range(4)] == [
        Message(1, b"12345678"), Lost(2, 4, "overflow"), Resync(5, 5000),
        Lost(5000, 5000, "overflow")]
    assert len(log) == 0 and log.bytes == 0
    assert Lost(1, 2) == Lost(1, 2, "unrepaired") != Lost(1, 2, "overflow")
    with pytest.raises(ValueError):
        Backlog(max_items=0)


def test_sub_max_queued_option_reaches_the_client(publisher):
    bb, pub = publisher
    proc = sub_process(bb, "--json", "--max-queued", "5", "--timeout", "1",
                       stdout=subprocess.PIPE)
    pub.publish_many_nowait([b"x" * 40000 for _ in range(40)])  # fills the 64 KiB pipe first
    time.sleep(1.0)
    out, _ = proc.communicate(timeout=30)
    records = [json.loads(line) for line in out.splitlines()]
    assert any(r.get("reason") == "overflow" for r in records)
    assert proc.returncode == 0


def test_cli_defaults_are_the_library_defaults():
    from pelotari.cli import fyrehose as cli
    from pelotari.fyrehose import client

    assert cli.MAX_QUEUED == client.DEFAULT_MAX_QUEUED
    assert cli.MAX_QUEUED_BYTES == client.DEFAULT_MAX_QUEUED_BYTES


# ---- 2. pub reads every line, as bytes -----------------------------------------------------

@pytest.fixture
def listener(backbone_factory):
    """(backbone, subscribed Client) to see what pub really published."""
    bb = backbone_factory()
    with Client(addr(bb)) as sub:
        assert sub.wait_connected(3)
        yield bb, sub


def test_pub_reports_bad_lines_and_publishes_all_the_others(listener):
    bb, sub = listener
    stdin = (b"first\n" + b"y" * 70000 + b"\n" + b"caf\xe9\n" + b"crlf\r\n" + b"z" * MAX_DATA
             + b"\n" + b"last without newline")
    res = run("pub", "-b", addr(bb), input=stdin)
    assert res.returncode == 1
    err = res.stderr.decode().splitlines()
    assert err[:2] == [
        f"line 2: too long (70000 bytes; at most {MAX_DATA}); skipped",
        "line 3: not UTF-8 (byte 0xe9 at offset 3; --binary publishes raw bytes); skipped"]
    assert err[2].startswith("published 4 messages in ") and err[2].endswith(
        "(4 confirmed, 0 not confirmed), 2 inputs skipped")
    assert len(err) == 3 and "Traceback" not in res.stderr.decode()
    got = collect(sub, 4)
    assert [m.data for m in got] == [b"first", b"crlf", b"z" * MAX_DATA, b"last without newline"]
    lines = res.stdout.decode().splitlines()
    assert [line.split("\t") for line in lines] == [
        [str(m.sequence), m.data.decode()] for m in got]


def test_pub_binary_publishes_raw_lines_and_prints_them_escaped(listener):
    bb, sub = listener
    res = run("pub", "-b", addr(bb), "--binary", input=b"\xff\x00\n\x1b[2Jwiped\r\n\n")
    assert res.returncode == 0, res.stderr
    got = collect(sub, 3)
    assert [m.data for m in got] == [b"\xff\x00", b"\x1b[2Jwiped\r", b""]
    assert res.stdout.decode().splitlines() == [
        f"{got[0].sequence}\tb'\\xff\\x00'", f"{got[1].sequence}\t\\x1b[2Jwiped\\r",
        f"{got[2].sequence}\t"]


def test_pub_file_publishes_the_whole_file_as_one_message(listener, tmp_path):
    bb, sub = listener
    blob = bytes(range(256)) * 255 + b"\n\n"  # 65,282 bytes, newlines and all
    path = tmp_path / "blob.bin"
    path.write_bytes(blob)
    res = run("pub", "-b", addr(bb), "--file", str(path))
    assert res.returncode == 0, res.stderr
    [msg] = collect(sub, 1)
    assert msg.data == blob
    assert res.stdout.decode() == f"{msg.sequence}\tfile {path}\n"
    res = run("pub", "-b", addr(bb), "--file", "-", input=b"from\nstdin\xff")
    assert res.returncode == 0, res.stderr
    assert collect(sub, 1)[0].data == b"from\nstdin\xff"
    path.write_bytes(b"w" * (MAX_DATA + 1))
    res = run("pub", "-b", addr(bb), "--file", str(path))
    assert res.returncode == 1
    assert f"file {path}: too long (over {MAX_DATA} bytes" in res.stderr.decode()
    assert run("pub", "-b", addr(bb), "--file", str(path), "x").returncode == 2
    assert collect(sub, 1, timeout=0.3) == []


def test_pub_arguments_are_checked_too(listener):
    bb, sub = listener
    res = run("pub", "-b", addr(bb), "ok", "x" * (MAX_DATA + 1), "fine")
    assert res.returncode == 1
    assert f"argument 2: too long ({MAX_DATA + 1} bytes; at most {MAX_DATA}); skipped" in \
        res.stderr.decode()
    assert [m.data for m in collect(sub, 2)] == [b"ok", b"fine"]


# ---- 3. sub output cannot be forged ---------------------------------------------------------

FORGERIES = [
    b"plain",
    b"two\n12345\tfake line",
    b"\x1b[2J\x1b[31mred\x1b]0;title\x07",
    b"cr\rover",
    b"tab\there",
    b"back\\slash \\n",
    "nel\u0085 ls\u2028 ps\u2029 rlo\u202e bell\x07 del\x7f".encode(),
    "caf\u00e9".encode(),
    b"\xff\xfe not utf-8\n",
]
SHOWN = [
    "plain",
    "two\\n12345\\tfake line",
    "\\x1b[2J\\x1b[31mred\\x1b]0;title\\x07",
    "cr\\rover",
    "tab\\there",
    "back\\\\slash \\\\n",
    "nel\\x85 ls\\u2028 ps\\u2029 rlo\\u202e bell\\x07 del\\x7f",
    "caf\u00e9",
    "b'\\xff\\xfe not utf-8\\n'",
]


def forged_run(bb, *extra):
    proc = sub_process(bb, "--count", str(len(FORGERIES)), *extra)
    with Client(addr(bb), flags=NOSUBSCRIBE | NOJOURNAL) as pub:
        assert pub.wait_connected(3)
        for data in FORGERIES:
            pub.publish(data)
            time.sleep(0.01)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return out


def test_sub_text_output_is_one_escaped_line_per_message(backbone_factory):
    out = forged_run(backbone_factory()).decode()
    lines = out.split("\n")
    assert lines[-1] == "" and len(lines) == len(FORGERIES) + 1
    seqs = [int(line.split("\t", 1)[0]) for line in lines[:-1]]
    assert seqs == list(range(seqs[0], seqs[0] + len(FORGERIES)))
    assert [line.split("\t", 1)[1] for line in lines[:-1]] == SHOWN


def test_sub_json_output_is_one_line_per_message_and_exact(backbone_factory):
    out = forged_run(backbone_factory(), "--json")
    assert b"\x1b" not in out and b"\r" not in out and "\u2028".encode() not in out
    records = [json.loads(line) for line in out.split(b"\n")[:-1]]
    assert len(records) == len(FORGERIES)
    assert [r["data"].encode() if "data" in r else base64.b64decode(r["data_base64"])
            for r in records] == FORGERIES


def test_sub_raw_writes_the_bytes_as_they_came(backbone_factory):
    out = forged_run(backbone_factory(), "--raw")
    assert out == b"".join(data + b"\n" for data in FORGERIES)
    assert run("sub", "--raw", "--json").returncode == 2


# ---- 4./5. close() ends every reader; Ctrl-C is clean ---------------------------------------

def test_async_close_ends_messages_and_wakes_receive(backbone_factory):
    bb = backbone_factory()

    async def main():
        sub = await AsyncClient.connect(addr(bb))
        await asyncio.wait_for(sub.up.wait(), 3)

        async def iterate():
            return [item async for item in sub.messages()]

        readers = [asyncio.create_task(iterate()), asyncio.create_task(iterate()),
                   asyncio.create_task(sub.receive())]
        await asyncio.sleep(0.2)
        await sub.close()
        _, pending = await asyncio.wait(readers, timeout=2)
        for task in pending:
            task.cancel()
        assert not pending, "close() left readers waiting"
        assert readers[0].result() == [] and readers[1].result() == []
        with pytest.raises(ConnectionAbortedError):
            readers[2].result()
        with pytest.raises(ConnectionAbortedError):
            await sub.receive()

    asyncio.run(main())


def test_async_client_queue_is_bounded_too(publisher):
    bb, pub = publisher

    async def main():
        sub = await AsyncClient.connect(addr(bb), max_queued=10)
        await asyncio.wait_for(sub.up.wait(), 3)
        pub.publish_many_nowait([b"m%d" % i for i in range(50)])
        for _ in range(100):
            if sub.stats()["overflow"] == 40:
                break
            await asyncio.sleep(0.02)
        items = [await asyncio.wait_for(sub.receive(), 2) for _ in range(11)]
        await sub.close()
        return items

    items = asyncio.run(main())
    base = items[0].sequence
    assert items[10] == Lost(base + 10, base + 49, "overflow")


def test_client_close_from_another_thread_ends_readers_at_once(backbone_factory):
    bb = backbone_factory()
    sub = Client(addr(bb)).start()
    assert sub.wait_connected(3)
    outcome = {}

    def receive_forever():
        try:
            outcome["receive"] = sub.receive()
        except ConnectionAbortedError as exc:
            outcome["receive"] = exc

    def iterate():
        outcome["messages"] = list(sub.messages())

    threads = [threading.Thread(target=receive_forever), threading.Thread(target=iterate)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    sub.close()
    for t in threads:
        t.join(2)
    assert not any(t.is_alive() for t in threads), "close() left a reader waiting"
    assert time.monotonic() - t0 < 1.0
    assert isinstance(outcome["receive"], ConnectionAbortedError)
    assert outcome["messages"] == []


def assert_one_line(err, prefix):
    text = err.decode() if isinstance(err, bytes) else err
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1 and text.startswith(prefix), text


def test_sub_with_stdin_from_dev_null_runs_until_ctrl_c(publisher):
    bb, pub = publisher
    proc = sub_process(bb, stdin=subprocess.DEVNULL)
    pub.publish_many_nowait([b"one", b"two"])
    time.sleep(0.5)
    assert proc.poll() is None, "sub ended on its own"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert [line.split(b"\t")[1] for line in out.splitlines()] == [b"one", b"two"]
    assert_one_line(err, "received 2 messages; 0 requests, 0 lost, 0 dropped unread")
    assert err.decode().rstrip().endswith("; interrupted")


def test_sub_ctrl_c_before_the_backbone_answers_still_prints_the_summary():
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    silent.settimeout(10)
    try:
        port = silent.getsockname()[1]
        proc = start("sub", "-b", f"127.0.0.1:{port}", stdin=subprocess.DEVNULL)
        silent.recvfrom(100)  # its first KEEPALIVE: it is waiting for the ACK now
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        silent.close()
    # Ctrl-C is 130 for every command (issue 27): one summary line, saying why nothing came.
    err = err.decode()
    assert proc.returncode == 130 and "Traceback" not in err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("received 0 messages;")
    assert lines[0].endswith("; interrupted (the backbone never answered)")


def test_pub_ctrl_c_prints_what_was_published_and_one_summary_line(listener):
    bb, sub = listener
    proc = start("pub", "-b", addr(bb), stdin=subprocess.PIPE)
    proc.stdin.write(b"a\nb\nc\n")
    proc.stdin.flush()
    got = collect(sub, 3)
    assert [m.data for m in got] == [b"a", b"b", b"c"]
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)  # while it waits for the next line
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert out.decode().splitlines() == [f"{m.sequence}\t{m.data.decode()}" for m in got]
    assert_one_line(err, "published 3 messages in ")
    assert err.decode().rstrip().endswith("(3 confirmed, 0 not confirmed); interrupted")
