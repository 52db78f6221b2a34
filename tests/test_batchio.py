"""recvmmsg/sendmmsg wrappers over real sockets on 127.0.0.1."""
import socket

import pytest

from fastpath.batchio import RecvBatch, SendBatch


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s


def test_send_many_and_receive_them_in_one_batch():
    a, b = udp(), udp()
    sent = SendBatch(8).send(a, [(b"d%d" % i, b.getsockname()) for i in range(20)])
    assert sent == 20  # more than capacity: several sendmmsg calls
    rx = RecvBatch(64, 2048)
    got = rx.recv(b)
    assert [d for d, _ in got] == [b"d%d" % i for i in range(20)]
    assert {src for _, src in got} == {a.getsockname()}
    assert rx.recv(b) == []  # non-blocking: nothing left


def test_recv_batch_capacity_limits_one_call():
    a, b = udp(), udp()
    SendBatch().send(a, [(b"x", b.getsockname())] * 10)
    rx = RecvBatch(4, 64)
    assert len(rx.recv(b)) == 4 and len(rx.recv(b)) == 4 and len(rx.recv(b)) == 2


def test_fan_out_sends_header_plus_shared_payload_to_each_address():
    a = udp()
    subs = [udp() for _ in range(5)]
    payload = bytearray(b"P" * 1000)
    n = SendBatch(2).fan_out(a, b"HDR", payload, [s.getsockname() for s in subs])
    assert n == 5
    for s in subs:
        assert s.recv(2000) == b"HDR" + b"P" * 1000


def test_a_refused_datagram_is_counted_and_the_rest_still_go():
    a, b = udp(), udp()
    batch = SendBatch()
    items = [(b"ok1", b.getsockname()), (b"x" * 70000, b.getsockname()), (b"ok2", b.getsockname())]
    assert batch.send(a, items) == 2
    assert batch.errors == 1
    assert b.recv(100) == b"ok1" and b.recv(100) == b"ok2"


def test_batch_sizes_are_limited():
    for bad in (0, 1025):
        with pytest.raises(ValueError):
            RecvBatch(bad, 64)
        with pytest.raises(ValueError):
            SendBatch(bad)
    RecvBatch(1024, 64)
    SendBatch(1024)
    with pytest.raises(ValueError):
        RecvBatch(1, 65537)


def test_a_gro_read_is_split_back_into_the_datagrams_sent():
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
            got = RecvBatch(8, 65536, control).recv(rx_sock)  # loopback delivers in sendmsg
            src = tx_sock.getsockname()
            if control:
                assert got == [(d, ("127.0.0.1", src[1])) for d in sent]
            else:  # without the control message the boundaries are lost
                assert got == [(b"".join(sent), ("127.0.0.1", src[1]))]
    finally:
        rx_sock.close()
        tx_sock.close()

