"""Codec micro-benchmarks: the Cython codec, the pure-Python reference and the scapy layer,
side by side in one run.

    .venv/bin/python -m pytest bench/micro --benchmark-enable --benchmark-group-by=param:case
"""
import array

import pytest
from scapy.all import raw

from fastpath import codec as cython_codec
from fastpath import refcodec as python_codec
from pelotari.layers import fyrehose as layers


class ScapyCodec:
    """The scapy layer behind the codec's call signatures."""

    decode = staticmethod(layers.Fyrehose)

    @staticmethod
    def encode_deliver(sequence, data):
        return raw(layers.FyrehoseDeliver(sequence=sequence, data=data))

    @staticmethod
    def encode_push(data):
        return raw(layers.FyrehosePush(data=data))


IMPLS = {"cython": cython_codec, "python": python_codec, "scapy": ScapyCodec}
DELIVER_16 = cython_codec.encode_deliver(123456789, b"x" * 16)
DELIVER_1K = cython_codec.encode_deliver(123456789, b"x" * 1024)
KEEPALIVE = cython_codec.encode_keepalive("", 0, 2, b"t" * 16)


def test_implementations_agree_on_the_benchmarked_inputs():
    for impl in IMPLS.values():
        assert impl.encode_deliver(123456789, b"x" * 16) == DELIVER_16
        assert impl.encode_push(b"x" * 1024) == cython_codec.encode_push(b"x" * 1024)


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("case", ["decode-deliver-16", "decode-deliver-1024", "decode-keepalive",
                                  "encode-deliver-16", "encode-push-1024"])
def test_codec(benchmark, impl, case):
    c = IMPLS[impl]
    if case == "decode-deliver-16":
        benchmark(c.decode, DELIVER_16)
    elif case == "decode-deliver-1024":
        benchmark(c.decode, DELIVER_1K)
    elif case == "decode-keepalive":
        benchmark(c.decode, KEEPALIVE)
    elif case == "encode-deliver-16":
        benchmark(c.encode_deliver, 123456789, b"x" * 16)
    else:
        benchmark(c.encode_push, b"x" * 1024)


# Buffers other than bytes in and bytearray out take the codec's typed-memoryview path.
BUFFER_CASES = {
    "decode-deliver-16-memoryview": lambda c: (c.decode, memoryview(DELIVER_16)),
    "encode-deliver-16-into-bytearray": lambda c: (c.encode_deliver_into, bytearray(64), 0,
                                                   123456789, b"x" * 16),
    "encode-deliver-16-into-memoryview": lambda c: (c.encode_deliver_into,
                                                    memoryview(bytearray(64)), 0, 123456789,
                                                    b"x" * 16),
    "encode-keepalive": lambda c: (c.encode_keepalive, "", 0, 2, b"t" * 16),
    "unpack-into-deliver-16": lambda c: (c.unpack_into, DELIVER_16, array.array("Q", [0]),
                                         array.array("I", [0]), array.array("I", [0])),
}


@pytest.mark.parametrize("impl", ["cython", "python"])
@pytest.mark.parametrize("case", sorted(BUFFER_CASES))
def test_codec_buffers(benchmark, impl, case):
    fn, *args = BUFFER_CASES[case](IMPLS[impl])
    benchmark(fn, *args)
