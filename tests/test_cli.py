"""The `pelotari` command, run as real processes."""
import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import PELOTARI

pytestmark = pytest.mark.e2e


def run(*args, input=None, timeout=30):
    return subprocess.run(PELOTARI + list(args), input=input, capture_output=True, text=True,
                          timeout=timeout)


def start(*args, **kw):
    return subprocess.Popen(PELOTARI + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def start_backbone(*extra):
    proc = start("backbone", "--host", "127.0.0.1", "--port", "0", *extra)
    line = proc.stderr.readline()
    assert "listening on 127.0.0.1:" in line, line
    port = int(line.split("127.0.0.1:")[1].split("/")[0])
    return proc, port


def next_stats(bb, predicate, timeout=10):
    """Read a --json-stats backbone's lines until one satisfies predicate; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = json.loads(bb.stdout.readline())
        if predicate(stats):
            return stats
    raise AssertionError("the backbone's stats never got there")


def wait_subscribers(bb, count, timeout=10):
    """Read a --json-stats backbone's lines until it counts `count` subscribers."""
    next_stats(bb, lambda st: st["subscribers"] == count, timeout)


def test_version_and_help():
    from pelotari import __version__

    out = run("--version")
    assert out.returncode == 0 and __version__ in out.stdout
    for cmd in ([], ["backbone"], ["pub"], ["sub"], ["demo"]):
        res = run(*cmd, "--help")
        assert res.returncode == 0 and "Usage:" in res.stdout and len(res.stdout) > 200, cmd


def test_cli_import_does_not_pull_scapy_or_the_backbone():
    code = ("import sys, pelotari.cli; "
            "print(sorted(m for m in ('scapy', 'pyspark', 'fastpath.backbone') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("args,needle", [
    (["backbone", "--port", "70000"], "70000"),
    (["pub", "-b", "127.0.0.1:notaport", "x"], "bad port"),
    (["sub", "--count", "0"], "0"),
    (["pub", "--pack", "8", "x"], "pack must be 0 or within 9..65507"),  # the library's limit
    (["sub", "--pack", "8"], "pack must be 0 or within 9..65507"),
    (["backbone", "--bogus"], "No such option"),
])
def test_bad_options_give_one_clear_line(args, needle):
    res = run(*args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and needle in res.stderr


def test_port_in_use_is_one_line_not_a_traceback():
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    try:
        res = run("backbone", "--host", "127.0.0.1", "--port", str(port))
    finally:
        holder.close()
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"Error: cannot bind 127.0.0.1:{port}: Address already in use"]


def test_pub_and_sub_through_a_backbone_process_and_clean_ctrl_c():
    bb, port = start_backbone("--json-stats", "--stats-interval", "0.2")
    try:
        sub = start("sub", "-b", f"127.0.0.1:{port}", "--count", "3", "--json")
        wait_subscribers(bb, 1)
        pub = run("pub", "-b", f"127.0.0.1:{port}", "one", "two", "three")
        assert pub.returncode == 0, pub.stderr
        seqs = [int(line.split("\t")[0]) for line in pub.stdout.splitlines()]
        assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]
        out, err = sub.communicate(timeout=10)
        assert sub.returncode == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert records == [{"sequence": s, "data": d} for s, d in zip(seqs, ["one", "two", "three"])]
        assert "received 3 messages" in err
    finally:
        bb.send_signal(signal.SIGINT)
        out, err = bb.communicate(timeout=10)
    assert bb.returncode == 130  # Ctrl-C (SIGTERM's is 0)
    assert "Traceback" not in err and "stopped after" in err and "3 pushes" in err


def test_packed_pub_and_sub_through_a_backbone_process():
    bb, port = start_backbone("--json-stats", "--stats-interval", "0.2")
    try:
        sub = start("sub", "-b", f"127.0.0.1:{port}", "--pack", "1472", "--count", "500", "--json")
        wait_subscribers(bb, 1)
        pub = run("pub", "-b", f"127.0.0.1:{port}", "--pack", "1472", "-n", "500", "-q", "m")
        assert pub.returncode == 0, pub.stderr
        assert "published 500 messages" in pub.stderr and "500 confirmed" in pub.stderr
        out, err = sub.communicate(timeout=10)
        assert sub.returncode == 0, err
        seqs = [json.loads(line)["sequence"] for line in out.splitlines()]
        assert seqs == list(range(seqs[0], seqs[0] + 500))
        stats = next_stats(bb, lambda st: st["pushes"] == 500)
        assert stats["packs_in"] >= 500 // 64 and stats["packs_out"] > 0
    finally:
        bb.send_signal(signal.SIGINT)
        bb.communicate(timeout=10)


def test_an_idle_packing_publisher_sends_each_line_without_waiting_for_a_pack():
    # The flush rule: a line typed into `pelotari pub --pack` is published at once, not held
    # until 64 lines fill a pack (or stdin ends).
    bb, port = start_backbone("--json-stats", "--stats-interval", "0.2")
    pub = None
    try:
        sub = start("sub", "-b", f"127.0.0.1:{port}", "--pack", "1472", "--count", "2", "--json")
        wait_subscribers(bb, 1)
        pub = subprocess.Popen(PELOTARI + ["pub", "-b", f"127.0.0.1:{port}", "--pack", "1472"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        for line in ("first", "second"):  # stdin stays open: nothing more is coming
            pub.stdin.write(line + "\n")
            pub.stdin.flush()
            seq, data = pub.stdout.readline().rstrip("\n").split("\t")
            assert data == line and int(seq) > 0  # confirmed while stdin is still open
        out, err = sub.communicate(timeout=10)
        assert [json.loads(x)["data"] for x in out.splitlines()] == ["first", "second"]
        pub.stdin.close()
        assert pub.wait(10) == 0 and "published 2 messages" in pub.stderr.read()
    finally:
        if pub is not None and pub.poll() is None:
            pub.kill()
        bb.send_signal(signal.SIGINT)
        bb.communicate(timeout=10)


def test_a_backbone_without_packing_refuses_packed_pushes():
    bb, port = start_backbone("--no-packing", "--json-stats", "--stats-interval", "0.2")
    try:
        res = run("pub", "-b", f"127.0.0.1:{port}", "--pack", "1472", "--timeout", "0.5", "a", "b")
        assert res.returncode == 1 and "0 confirmed, 2 not confirmed" in res.stderr
        assert next_stats(bb, lambda st: st["drops"]["length_mismatch"] == 1)["pushes"] == 0
    finally:
        bb.send_signal(signal.SIGINT)
        bb.communicate(timeout=10)


def test_pub_reads_stdin_lines_and_count_limits_them():
    bb, port = start_backbone()
    try:
        res = run("pub", "-b", f"127.0.0.1:{port}", "--count", "2", input="a\nb\nc\n")
        assert res.returncode == 0, res.stderr
        assert [line.split("\t")[1] for line in res.stdout.splitlines()] == ["a", "b"]
        res = run("pub", "-b", f"127.0.0.1:{port}", "-n", "5", "-r", "100", "--no-confirm", "-q", "x")
        assert res.returncode == 0 and "published 5 messages" in res.stderr
    finally:
        bb.terminate()
        bb.wait(10)
    assert bb.returncode == 0  # SIGTERM is a clean stop too


def test_sub_prints_sequence_tab_text_and_repr_for_binary():
    bb, port = start_backbone("--json-stats", "--stats-interval", "0.2")
    try:
        sub = start("sub", "-b", f"127.0.0.1:{port}", "--count", "2")
        wait_subscribers(bb, 1)
        from pelotari.fyrehose import Client
        from pelotari.fyrehose.codec import NOSUBSCRIBE

        with Client(f"127.0.0.1:{port}", flags=NOSUBSCRIBE) as pub:
            pub.wait_connected(3)
            pub.publish("héllo".encode())
            pub.publish(b"\xff\x00")
        out, err = sub.communicate(timeout=10)
    finally:
        bb.terminate()
        bb.wait(10)
    lines = [line.split("\t") for line in out.splitlines()]
    assert [text for _, text in lines] == ["héllo", "b'\\xff\\x00'"]
    assert int(lines[1][0]) == int(lines[0][0]) + 1


def test_pub_without_backbone_fails_in_one_line():
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    try:
        res = run("pub", "-b", f"127.0.0.1:{port}", "--timeout", "0.3", "x")
    finally:
        silent.close()
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr == (f"Error: the backbone at 127.0.0.1:{port} is not answering (is "
                          "`pelotari backbone` running there, and UDP let through?)\n")


def test_sub_that_never_reached_a_backbone_says_so_and_fails():
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    try:
        res = run("sub", "-b", f"127.0.0.1:{port}", "--timeout", "3.5",
                  timeout=30)
    finally:
        silent.close()
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        f"warning: the backbone at 127.0.0.1:{port} is not answering yet; still trying",
        "received 0 messages; 0 requests, 0 lost, 0 dropped unread, 0 duplicates",
        f"Error: the backbone at 127.0.0.1:{port} never answered"]


def test_demo_shows_messages_flowing_to_every_subscriber():
    res = run("demo", "--messages", "8", "--rate", "50", timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sub-1 received 8/8 messages, in sequence order" in res.stdout
    assert "sub-2 received 8/8 messages, in sequence order" in res.stdout
    assert res.stdout.count("message 8 of 8") == 3  # both subscribers and the publisher


def test_the_demos_stats_line_counts_its_subscribers_not_the_publisher():
    """Issue 27: "subscribers 3" for 2 subscribers (the confirming publisher is a subscriber of
    the backbone's too)."""
    res = run("demo", "--messages", "30", "--rate", "10", "--subscribers", "2", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    counts = [int(line.split("] subscribers ")[1].split()[0]) for line in res.stdout.splitlines()
              if line.startswith("[backbone] subscribers ")]
    assert counts and max(counts) == 2, res.stdout  # (fewer while one was still signing on)


@pytest.mark.parametrize("args", [
    ["potato", "node", "--name", "a", "--transport", "tcp"],
    ["bully", "start", "--bind", "127.0.0.1:0"],
])
def test_a_service_started_with_stdout_and_stdin_closed_runs_and_stops(args):
    """`cmd <&- >&-`: Python leaves sys.stdout None; the service must neither crash nor
    print a traceback (it did: AttributeError in the output's set-up)."""
    import os

    def close_in_out():
        os.close(0)
        os.close(1)

    proc = subprocess.Popen(PELOTARI + args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=close_in_out)
    time.sleep(1.5)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(5)
    err = proc.stderr.read()
    assert code == 130 and "Traceback" not in err, err
