"""One error hierarchy for every fyrehose decode/encode failure, rooted in ValueError."""


class CodecError(ValueError):
    """A datagram or field that the fyrehose wire format does not allow."""

    reason = "malformed"


class TruncatedPacket(CodecError):
    """The datagram ends before its fixed header does."""

    reason = "truncated"


class LengthMismatch(CodecError):
    """LENGTH disagrees with the datagram, or a fixed-size packet has extra bytes."""

    reason = "length_mismatch"


class UnknownPacketType(CodecError):
    """The first byte is not a packet type of the wire table (fastpath/packets.py)."""

    reason = "unknown_type"


class OversizePacket(CodecError):
    """DATA is larger than the configured maximum."""

    reason = "oversize"


class InvalidField(CodecError):
    """A field value outside its range (FROM_SEQ > TO_SEQ, port > 65535, INFO COUNT > 5, ...)."""

    reason = "invalid_field"


class BufferTooSmall(CodecError):
    """The caller's buffer cannot hold the encoded packet."""

    reason = "buffer_too_small"
