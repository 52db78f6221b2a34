"""The client's journal and batch I/O: the Cython build and its pure-Python twin side by side
(what PELOTARI_PURE_PYTHON=1 costs the client stack).

    .venv/bin/python -m pytest bench/micro/test_twins_bench.py --benchmark-enable \
        --benchmark-group-by=func
"""
import socket

import pytest

from fastpath import batchio, journal, refbatchio, refjournal

JOURNALS = {"cython": journal, "python": refjournal}
BATCHIO = {"cython": batchio, "python": refbatchio}


@pytest.mark.parametrize("impl", sorted(JOURNALS))
def test_track_and_store_1000_in_order(benchmark, impl):
    j = JOURNALS[impl]

    def run():
        tracker, store = j.GapTracker(), j.Journal(4096)
        for seq in range(1000):
            tracker.offer(seq, b"m", 0.0)
            store.store(seq, b"m")
        return tracker.ready()

    assert len(benchmark(run)) == 1000


@pytest.mark.parametrize("impl", sorted(BATCHIO))
def test_send_and_receive_64_datagrams(benchmark, impl):
    b = BATCHIO[impl]
    tx, rx = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    rx.bind(("127.0.0.1", 0))
    out = [(b"d" * 100, rx.getsockname())] * 64
    send, recv = b.SendBatch(64), b.RecvBatch(64, 2048)

    def run():
        send.send(tx, out)
        return recv.recv(rx)

    try:
        assert len(benchmark(run)) == 64
    finally:
        tx.close()
        rx.close()
