"""The profiling scripts' arithmetic (bench/profile): the paired runs' statistics and the
wake-up trace's bookkeeping, on figures whose answers are known."""
import importlib.util
import os
import pathlib
import re
import socket
import threading

import pytest

PROFILE = pathlib.Path(__file__).resolve().parent.parent / "bench" / "profile"


def script(name):
    spec = importlib.util.spec_from_file_location(f"profile_{name}", PROFILE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sign_test_is_two_sided_and_capped_at_one():
    paired = script("paired_latency")
    assert paired.sign_test(0, 0) == 1.0
    assert paired.sign_test(5, 5) == 1.0
    assert paired.sign_test(32, 49) == pytest.approx(0.0748, abs=1e-4)
    assert paired.sign_test(10, 0) == pytest.approx(2 / 1024)
    assert paired.sign_test(0, 10) == paired.sign_test(10, 0)


def test_the_median_interval_is_the_textbook_order_statistics():
    paired = script("paired_latency")
    # n = 20: the 6th and 15th smallest (coverage 95.9 %); n = 60: the 22nd and 39th
    assert paired.median_interval(list(range(20))) == (5, 14)
    assert paired.median_interval(list(range(60))) == (21, 38)
    assert paired.median_interval(list(range(6))) == (0, 5)  # 96.9 %
    assert paired.median_interval(list(range(5))) == (None, None)  # 93.8 % at best


def test_the_wake_up_trace_splits_queued_received_and_handled():
    wakes = script("server_wakes")
    us = 1e-6
    events = [
        (100 * us, "sched:sched_wakeup", "comm=x pid=7 prio=120 target_cpu=000"),
        (110 * us, "sched:sched_switch", "prev_comm=swapper prev_pid=0 ==> next_pid=7"),
        (113 * us, "syscalls:sys_exit_recvmmsg", "0x5"),
        (140 * us, "syscalls:sys_enter_recvmmsg", "NR 299 (...)"),
        # data was already queued: a batch without a wake-up
        (141 * us, "syscalls:sys_exit_recvmmsg", "0x2"),
        (150 * us, "syscalls:sys_enter_recvmmsg", "NR 299 (...)"),
        # the 100 ms timeout: nothing received, no batch
        (200 * us, "syscalls:sys_exit_recvmmsg", "0xfffffffffffffff5"),
        (201 * us, "syscalls:sys_enter_recvmmsg", "NR 299 (...)"),
    ]
    got = wakes.batches(events)
    assert [(round(h, 3), n) for h, n, _ in got] == [(27.0, 5), (9.0, 2)]
    assert [round(x, 3) for x in got[0][2]] == [10.0, 3.0, 40.0]
    assert got[1][2] is None


@pytest.mark.parametrize("name, argv", [
    ("paired_latency", ["pelotari,pelotari", "50000"]),
    ("paired_latency", ["pelotari,nats", "50000"]),
    ("paired_latency", ["pelotari,reference", "0"]),
    ("paired_latency", ["pelotari,reference", "49"]),
    ("paired_latency", ["pelotari,reference", "1000", "0"]),
    ("paired_latency", ["pelotari,reference", "1000", "3", "0"]),
    ("server_wakes", ["pelotari", "50000"]),
    ("server_wakes", ["pelotari,reference", "inf"]),
    ("server_wakes", ["pelotari,reference", "1000", "0"]),
])
def test_the_scripts_refuse_a_bad_command_line_before_starting_anything(name, argv, capsys):
    with pytest.raises(SystemExit) as exit:
        script(name).arguments(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.count("\n") <= 3  # usage and one line


def test_the_paired_runs_probe_reads_this_threads_and_this_processs_counters():
    paired = script("paired_latency")
    probe = paired.Probe(threading.get_native_id(), os.getpid())
    before = probe.read()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", ("127.0.0.1", 9))  # some kernel work between the reads
    after = probe.read()
    d = paired.Probe.delta(before, after)
    assert set(d) == {"wait_ms", "preempted", "sub_wait_ms", "steal_ms", "rcvbuf", "sndbuf"}
    assert all(v >= 0 for v in d.values())
    # this thread is one of this process's: its wait is part of the process's
    assert after["sub_wait_ms"] >= after["wait_ms"] > 0
    assert paired.Probe.describe(d).startswith("wait ")


PAIRED_RUNS = PROFILE.parent.parent / "docs" / "bench" / "paired-latency-2026-11-28.txt"
README = PROFILE.parent.parent / "README.md"


def paired_rows(text):
    """README table rows for each run saved in a paired_latency.py output file that had enough
    lossless pairs for a 95 % interval."""
    rows = []
    for block in text.split("\n$ ")[1:]:
        command = block.splitlines()[0].split()
        a, b = command[2].split(",")
        rate, pairs = int(command[3]), int(command[4])
        med = {n: re.search(rf"^{re.escape(n)}: median p99 (\d+) µs", block, re.M).group(1)
               for n in (a, b)}
        lower, counted, equal, p = re.search(
            rf"^{re.escape(a)} lower in (\d+) of (\d+) pairs \((\d+) equal\); sign test p = "
            r"([\d.]+)", block, re.M).groups()
        interval = re.search(
            rf"^{re.escape(a)} minus {re.escape(b)}: median ([+-]\d+) µs, 95 % interval "
            r"([+-]\d+) to ([+-]\d+) µs", block, re.M)
        if interval is None:
            continue
        median, lo, hi = interval.groups()
        higher = int(counted) - int(lower) - int(equal)
        pairs_cell = f"{pairs}" if int(counted) == pairs else f"{counted} of {pairs}"

        def signed(x):
            return "0" if int(x) == 0 else x.replace("-", "−")
        rows.append(f"| {rate:,} | {'with GSO' if b.endswith('-gso') else 'without GSO'} | "
                    f"{pairs_cell} | {int(med[a]):,} / {int(med[b]):,} | "
                    f"{lower} : {higher} ({equal}) | p = {p} | "
                    f"{signed(median)} µs ({signed(lo)} to {signed(hi)}) |")
    return rows


def test_the_readmes_paired_table_is_the_saved_runs():
    rows = paired_rows(PAIRED_RUNS.read_text())
    assert len(rows) == 5  # without GSO at 200,000 both servers lost, in 57 and 58 of 60 trials
    text = README.read_text()
    for row in rows:
        assert row in text, f"README lacks the saved run's row: {row}"
