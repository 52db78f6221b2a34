"""The fyrehose codec: fastpath's Cython build, or the pure-Python reference.

PELOTARI_PURE_PYTHON=1 selects the reference (as msgpack's MSGPACK_PUREPYTHON does); so does a
missing extension.
"""
import os

from fastpath.errors import (BufferTooSmall, CodecError, InvalidField, LengthMismatch,  # noqa: F401
                             OversizePacket, TruncatedPacket, UnknownPacketType)
from fastpath.packets import *  # noqa: F401,F403

if os.environ.get("PELOTARI_PURE_PYTHON"):
    from fastpath.refcodec import *  # noqa: F401,F403
    IMPLEMENTATION = "python"
else:
    try:
        from fastpath.codec import *  # noqa: F401,F403
        IMPLEMENTATION = "cython"
    except ImportError:  # pragma: no cover - only without a built extension
        from fastpath.refcodec import *  # noqa: F401,F403
        IMPLEMENTATION = "python"
