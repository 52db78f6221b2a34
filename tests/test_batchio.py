"""Batch datagram I/O over real sockets on 127.0.0.1: every test runs on fastpath.batchio
(recvmmsg/sendmmsg) and on its pure-Python twin fastpath.refbatchio."""
import socket

import pytest

from conftest import implementations

BATCHIO = implementations("batchio", "refbatchio")


@pytest.fixture(params=sorted(BATCHIO))
def bm(request):
    """Each batch I/O implementation in turn (the Cython build and the pure-Python twin)."""
    return BATCHIO[request.param]


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s


@pytest.mark.parametrize("slot_size", [1, 25, 64, 65, 2048, 65508, 65536])
def test_receive_slots_start_on_cache_lines(slot_size):
    # A frame that straddles two cache lines cost the fan-out's copy, made once per subscriber,
    # twice the time (perf: _copy_from_iter, 65,508-byte slots); each slot starts on a line.
    if "cython" not in BATCHIO:
        pytest.skip("the pure-Python twin reads into one bytearray: it has no slot arena")
    rx = BATCHIO["cython"].RecvBatch(8, slot_size)
    starts = [rx._slot_address(i) for i in range(8)]
    assert all(a % 64 == 0 for a in starts)
    if slot_size > 4096:  # and not a page apart: their first lines fall in different sets
        assert len({a % 4096 for a in starts}) == len(starts)
    assert all(b - a >= slot_size for a, b in zip(starts, starts[1:]))
    with pytest.raises(IndexError):
        rx._slot_address(8)


def test_send_many_and_receive_them_in_one_batch(bm):
    a, b = udp(), udp()
    sent = bm.SendBatch(8).send(a, [(b"d%d" % i, b.getsockname()) for i in range(20)])
    assert sent == 20  # more than capacity: several sendmmsg calls
    rx = bm.RecvBatch(64, 2048)
    got = rx.recv(b)
    assert [d for d, _ in got] == [b"d%d" % i for i in range(20)]
    assert {src for _, src in got} == {a.getsockname()}
    assert rx.recv(b) == []  # non-blocking: nothing left


def test_recv_batch_capacity_limits_one_call(bm):
    a, b = udp(), udp()
    bm.SendBatch().send(a, [(b"x", b.getsockname())] * 10)
    rx = bm.RecvBatch(4, 64)
    assert len(rx.recv(b)) == 4 and len(rx.recv(b)) == 4 and len(rx.recv(b)) == 2


def test_fan_out_sends_header_plus_shared_payload_to_each_address(bm):
    a = udp()
    subs = [udp() for _ in range(5)]
    payload = bytearray(b"P" * 1000)
    n = bm.SendBatch(2).fan_out(a, b"HDR", payload, [s.getsockname() for s in subs])
    assert n == 5
    for s in subs:
        assert s.recv(2000) == b"HDR" + b"P" * 1000


def test_a_refused_datagram_is_counted_and_the_rest_still_go(bm):
    a, b = udp(), udp()
    batch = bm.SendBatch()
    items = [(b"ok1", b.getsockname()), (b"x" * 70000, b.getsockname()), (b"ok2", b.getsockname())]
    assert batch.send(a, items) == 2
    assert batch.errors == 1
    assert b.recv(100) == b"ok1" and b.recv(100) == b"ok2"


def test_batch_sizes_are_limited(bm):
    for bad in (0, 1025):
        with pytest.raises(ValueError):
            bm.RecvBatch(bad, 64)
        with pytest.raises(ValueError):
            bm.SendBatch(bad)
    bm.RecvBatch(1024, 64)
    bm.SendBatch(1024)
    with pytest.raises(ValueError):
        bm.RecvBatch(1, 65537)


def test_a_gro_read_is_split_back_into_the_datagrams_sent(bm):
    import struct

    rx_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx_sock.bind(("127.0.0.1", 0))
        try:
            rx_sock.setsockopt(socket.IPPROTO_UDP, 104, 1)  # UDP_GRO
        except OSError:
            pytest.skip("this kernel has no UDP_GRO")
        rx_sock.setblocking(False)
        sent = [bytes([i]) * 100 for i in range(9)] + [b"tail"]  # the last may be shorter
        for control in (True, False):
            # One UDP_SEGMENT send: on loopback a GRO socket gets it as one 904-byte read.
            tx_sock.sendmsg([b"".join(sent)], [(socket.IPPROTO_UDP, 103, struct.pack("H", 100))],
                            0, rx_sock.getsockname())
            got = bm.RecvBatch(8, 65536, control).recv(rx_sock)  # loopback delivers in sendmsg
            src = tx_sock.getsockname()
            if control:
                assert got == [(d, ("127.0.0.1", src[1])) for d in sent]
            else:  # without the control message the boundaries are lost
                assert got == [(b"".join(sent), ("127.0.0.1", src[1]))]
    finally:
        rx_sock.close()
        tx_sock.close()



def test_a_read_longer_than_the_slot_is_cut_and_flagged_truncated(bm):
    a, b = udp(), udp()
    a.sendto(b"L" * 100, b.getsockname())
    a.sendto(b"short", b.getsockname())
    rx = bm.RecvBatch(4, 64)
    assert [d for d, _ in rx.recv(b)] == [b"L" * 64, b"short"]
    assert rx.count == 2 and rx.truncated_at(0) and not rx.truncated_at(1)
    with pytest.raises(IndexError):
        rx.truncated_at(2)


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_neither_side_waits_on_a_blocking_socket_nor_changes_its_timeout(bm, timeout):
    a, b = udp(), udp()
    a.settimeout(timeout)
    b.settimeout(timeout)
    assert bm.RecvBatch(4, 64).recv(b) == []  # nothing queued: at once, not after the timeout
    assert bm.SendBatch(4).send(a, [(b"x", b.getsockname())]) == 1
    assert [d for d, _ in bm.RecvBatch(4, 64).recv(b)] == [b"x"]
    assert a.gettimeout() == timeout and b.gettimeout() == timeout


def test_counters_add_up_over_sends(bm):
    a, b = udp(), udp()
    batch = bm.SendBatch(2)
    batch.send(a, [(b"abc", b.getsockname())] * 3)
    batch.fan_out(a, b"H", bytearray(b"PP"), [b.getsockname()])
    assert (batch.sent, batch.bytes_sent, batch.errors, batch.would_block) == (4, 12, 0, 0)
    assert batch.count == 0  # nothing stays queued between calls


def test_an_empty_datagram_is_received_as_one(bm):
    a, b = udp(), udp()
    a.sendto(b"", b.getsockname())
    a.sendto(b"z", b.getsockname())
    assert [d for d, _ in bm.RecvBatch(4, 64).recv(b)] == [b"", b"z"]


def test_a_bad_address_refuses_the_whole_call_before_anything_is_sent(bm):
    a, b = udp(), udp()
    batch = bm.SendBatch()
    for bad, error in ((("localhost", 1), OSError), (("127.0.0.1", 70000), OverflowError)):
        with pytest.raises(error):
            batch.send(a, [(b"first", b.getsockname()), (b"x", bad)])
    assert batch.sent == 0 and bm.RecvBatch(4, 64).recv(b) == []
