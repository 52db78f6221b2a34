"""Codec micro-benchmarks: Cython vs the pure-Python reference, side by side in one run.

    .venv/bin/python -m pytest bench/micro --benchmark-enable --benchmark-group-by=param:case
"""
import pytest

from fastpath import codec as cython_codec
from fastpath import refcodec as python_codec

IMPLS = {"cython": cython_codec, "python": python_codec}
DELIVER_16 = cython_codec.encode_deliver(123456789, b"x" * 16)
DELIVER_1K = cython_codec.encode_deliver(123456789, b"x" * 1024)
KEEPALIVE = cython_codec.encode_keepalive("", 0, 2, b"t" * 16)


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
