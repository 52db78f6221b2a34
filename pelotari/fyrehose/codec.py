"""The fyrehose codec: fastpath's Cython build, or the pure-Python reference.

PELOTARI_PURE_PYTHON=1 selects the reference (as msgpack's MSGPACK_PUREPYTHON does); so does a
missing extension (fastpath/implementation.py).
"""
from fastpath.errors import (BufferTooSmall, CodecError, InvalidField, LengthMismatch,  # noqa: F401
                             OversizePacket, TruncatedPacket, UnknownPacketType)
from fastpath.implementation import compiled
from fastpath.packets import *  # noqa: F401,F403

if compiled("codec") is None:
    from fastpath.refcodec import *  # noqa: F401,F403
    IMPLEMENTATION = "python"
else:
    from fastpath.codec import *  # noqa: F401,F403
    IMPLEMENTATION = "cython"
