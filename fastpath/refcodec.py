"""Pure-Python reference fyrehose codec: same API and errors as fastpath.codec."""
import socket
import struct

from fastpath.errors import (BufferTooSmall, InvalidField, LengthMismatch, OversizePacket,
                             TruncatedPacket, UnknownPacketType)
from fastpath.packets import (BY_CODE, DEFAULT_PACK_LIMIT, DELIVER, FIXED_SIZES, FORWARD,
                              HEADER_SIZE, INFO, INFO_SIZE, KEEPALIVE, KEEPALIVE_ACK, MAX_DATA,
                              MAX_DATAGRAM, MAX_EPOCH, MAX_MEMBERS, MAX_SEQUENCE, MEMBER_SIZE, PUSH,
                              QUERY, QUERY_SIZE, REQUEST, TOKEN_SIZE, Deliver, Forward, Info,
                              Keepalive, KeepaliveAck, Push, Query, Request)


def _fields(code):
    """Field name -> slice of the datagram, from the wire table's layout of `code`."""
    return {name: slice(BY_CODE[code].offset(name), BY_CODE[code].offset(name) + width)
            for name, width in BY_CODE[code].layout}


# REQUEST and FORWARD share a layout; so do DELIVER and PUSH (SEQUENCE or UNUSED).
_DATA, _RANGE, _KEEPALIVE, _ACK = (_fields(c) for c in (DELIVER, REQUEST, KEEPALIVE, KEEPALIVE_ACK))
_QUERY, _INFO = _fields(QUERY), _fields(INFO)  # the backbone-cluster extension


def _u48(value, field):
    if not 0 <= value <= MAX_SEQUENCE:
        raise InvalidField(f"{field} {value} does not fit in 48 bits")
    return value.to_bytes(6, "big")


def _port(value):
    if not 0 <= value <= 0xFFFF:
        raise InvalidField(f"PORT {value} is outside 0..65535")
    return value


def _u64(value, field):
    if not 0 <= value <= MAX_EPOCH:
        raise InvalidField(f"{field} {value} does not fit in 64 bits")
    return value.to_bytes(8, "big")


def _u8(value, field):
    if not 0 <= value <= 0xFF:
        raise InvalidField(f"{field} {value} does not fit in 8 bits")
    return bytes([value])


def _addr(addr):
    if not addr:
        return b"\0\0\0\0"
    try:
        packed = socket.inet_aton(addr)
    except (OSError, TypeError):
        raise InvalidField(f"ADDR {addr!r} is not an IPv4 address") from None
    return packed


def _token(token):
    token = bytes(token)
    if len(token) != TOKEN_SIZE:
        raise InvalidField(f"TOKEN must be {TOKEN_SIZE} bytes, got {len(token)}")
    return token


def _place(buf, offset, packet):
    view = memoryview(buf)
    if view.readonly:
        raise TypeError("buffer is read-only")
    if offset < 0 or len(packet) > view.nbytes - offset:
        raise BufferTooSmall(
            f"packet of {len(packet)} bytes does not fit at offset {offset} of a {view.nbytes}-byte buffer")
    view.cast("B")[offset:offset + len(packet)] = packet
    return len(packet)


def _data_packet(ptype, seq, data, max_data):
    data = bytes(data)
    if len(data) > max_data:
        raise OversizePacket(f"DATA of {len(data)} bytes exceeds the limit of {max_data}")
    return bytes([ptype]) + len(data).to_bytes(2, "big") + seq + data


def _range_packet(ptype, addr, port, from_seq, to_seq):
    lo, hi = _u48(from_seq, "FROM_SEQ"), _u48(to_seq, "TO_SEQ")
    packed_addr, port = _addr(addr), _port(port)
    if from_seq > to_seq:
        raise InvalidField(f"FROM_SEQ {from_seq} is after TO_SEQ {to_seq}")
    return bytes([ptype]) + packed_addr + struct.pack(">H", port) + lo + hi


def encode_deliver(sequence, data, max_data=MAX_DATA):
    """Return a DELIVER datagram."""
    return _data_packet(DELIVER, _u48(sequence, "SEQUENCE"), data, max_data)


def encode_push(data, max_data=MAX_DATA):
    """Return a PUSH datagram."""
    return _data_packet(PUSH, bytes(6), data, max_data)


def encode_request(addr, port, from_seq, to_seq):
    """Return a REQUEST datagram (FROM_SEQ..TO_SEQ inclusive)."""
    return _range_packet(REQUEST, addr, port, from_seq, to_seq)


def encode_forward(addr, port, from_seq, to_seq):
    """Return a FORWARD datagram (FROM_SEQ..TO_SEQ inclusive)."""
    return _range_packet(FORWARD, addr, port, from_seq, to_seq)


def encode_keepalive(addr, port, flags, token):
    """Return a KEEPALIVE datagram."""
    packed_addr, port, fl = _addr(addr), _port(port), _u48(flags, "FLAGS")
    return bytes([KEEPALIVE]) + packed_addr + struct.pack(">H", port) + fl + _token(token)


def encode_keepalive_ack(token):
    """Return a KEEPALIVE-ACK datagram."""
    return bytes([KEEPALIVE_ACK]) + _token(token)


def encode_query(token):
    """Return a QUERY datagram (cluster extension): 64 bytes, PADDING zeroed."""
    return (bytes([QUERY]) + _token(token)).ljust(QUERY_SIZE, b"\0")


def encode_info(token, epoch, addr, port, flags, members=()):
    """Return an INFO datagram (cluster extension): 64 bytes, whatever the member count."""
    token, epoch = _token(token), _u64(epoch, "EPOCH")
    packed_addr, port, flags = _addr(addr), _port(port), _u8(flags, "FLAGS")
    members = tuple(members)
    if len(members) > MAX_MEMBERS:
        raise InvalidField(f"INFO lists at most {MAX_MEMBERS} members, got {len(members)}")
    slots = b""
    for member in members:
        try:
            member_addr, member_port = member
        except (TypeError, ValueError):
            raise InvalidField(f"a member is (addr, port), not {member!r}") from None
        slots += _addr(member_addr) + struct.pack(">H", _port(member_port))
    out = (bytes([INFO]) + token + epoch + packed_addr + struct.pack(">H", port) + flags
           + bytes([len(members)]) + slots.ljust(MAX_MEMBERS * MEMBER_SIZE, b"\0"))
    return out.ljust(INFO_SIZE, b"\0")


def encode_deliver_into(buf, offset, sequence, data, max_data=MAX_DATA):
    """Write a DELIVER into buf at offset; return the number of bytes written."""
    return _place(buf, offset, encode_deliver(sequence, data, max_data))


def encode_push_into(buf, offset, data, max_data=MAX_DATA):
    """Write a PUSH (UNUSED zeroed) into buf at offset; return the number of bytes written."""
    return _place(buf, offset, encode_push(data, max_data))


def encode_request_into(buf, offset, addr, port, from_seq, to_seq):
    """Write a REQUEST into buf at offset; return the number of bytes written."""
    return _place(buf, offset, encode_request(addr, port, from_seq, to_seq))


def encode_forward_into(buf, offset, addr, port, from_seq, to_seq):
    """Write a FORWARD into buf at offset; return the number of bytes written."""
    return _place(buf, offset, encode_forward(addr, port, from_seq, to_seq))


def encode_keepalive_into(buf, offset, addr, port, flags, token):
    """Write a KEEPALIVE into buf at offset; return the number of bytes written."""
    return _place(buf, offset, encode_keepalive(addr, port, flags, token))


def encode_keepalive_ack_into(buf, offset, token):
    """Write a KEEPALIVE-ACK into buf at offset; return the number of bytes written."""
    return _place(buf, offset, encode_keepalive_ack(token))


def encode_query_into(buf, offset, token):
    """Write a QUERY (cluster extension; PADDING zeroed) into buf at offset; return its size."""
    return _place(buf, offset, encode_query(token))


def encode_info_into(buf, offset, token, epoch, addr, port, flags, members=()):
    """Write an INFO (cluster extension; `members` ((addr, port), ...), at most 5; unused slots
    and PADDING zeroed) into buf at offset; return its size."""
    return _place(buf, offset, encode_info(token, epoch, addr, port, flags, members))


def encode(packet, max_data=MAX_DATA):
    """Encode any decoded packet back to its datagram."""
    cls = type(packet)
    if cls is Deliver:
        return encode_deliver(packet.sequence, packet.data, max_data)
    if cls is Push:
        return encode_push(packet.data, max_data)
    if cls is Request:
        return encode_request(packet.addr, packet.port, packet.from_seq, packet.to_seq)
    if cls is Forward:
        return encode_forward(packet.addr, packet.port, packet.from_seq, packet.to_seq)
    if cls is Keepalive:
        return encode_keepalive(packet.addr, packet.port, packet.flags, packet.token)
    if cls is KeepaliveAck:
        return encode_keepalive_ack(packet.token)
    if cls is Query:
        return encode_query(packet.token)
    if cls is Info:
        return encode_info(packet.token, packet.epoch, packet.addr, packet.port, packet.flags,
                           packet.members)
    raise TypeError(f"not a fyrehose packet: {packet!r}")


def _validate(view, max_data):
    n = len(view)
    if n < 1:
        raise TruncatedPacket("empty datagram")
    ptype = view[0]
    if ptype in (DELIVER, PUSH):
        if n < HEADER_SIZE:
            raise TruncatedPacket(f"{n}-byte datagram is shorter than the 0x{ptype:x} packet's header")
        if n - HEADER_SIZE > max_data:
            raise OversizePacket(f"DATA of {n - HEADER_SIZE} bytes exceeds the limit of {max_data}")
        length = int.from_bytes(view[_DATA["length"]], "big")
        if length != n - HEADER_SIZE:
            raise LengthMismatch(
                f"LENGTH says {length} bytes of DATA, datagram carries {n - HEADER_SIZE}")
        return ptype
    if ptype not in FIXED_SIZES:
        raise UnknownPacketType(f"unknown packet type 0x{ptype:02x}")
    if n < FIXED_SIZES[ptype]:
        raise TruncatedPacket(f"{n}-byte datagram is shorter than the 0x{ptype:x} packet's header")
    if n != FIXED_SIZES[ptype]:
        raise LengthMismatch(f"0x{ptype:x} packet is fixed-size; datagram has {n} bytes")
    if ptype in (REQUEST, FORWARD):
        lo = int.from_bytes(view[_RANGE["from_seq"]], "big")
        hi = int.from_bytes(view[_RANGE["to_seq"]], "big")
        if lo > hi:
            raise InvalidField(f"FROM_SEQ {lo} is after TO_SEQ {hi}")
    if ptype == INFO and view[_INFO["count"].start] > MAX_MEMBERS:
        raise InvalidField(
            f"COUNT {view[_INFO['count'].start]} is more than the {MAX_MEMBERS} member slots")
    return ptype


def packet_type(data):
    """Return the type byte of a datagram after validating it, raising CodecError if invalid."""
    return _validate(memoryview(data).cast("B"), MAX_DATA)


def decode(data, max_data=MAX_DATA):
    """Decode one datagram; DELIVER/PUSH DATA is a zero-copy memoryview of the input."""
    view = memoryview(data).cast("B")
    ptype = _validate(view, max_data)
    if ptype == DELIVER:
        return Deliver(int.from_bytes(view[_DATA["sequence"]], "big"), view[HEADER_SIZE:])
    if ptype == PUSH:
        return Push(view[HEADER_SIZE:])
    if ptype in (REQUEST, FORWARD):
        cls = Request if ptype == REQUEST else Forward
        return cls(socket.inet_ntoa(view[_RANGE["addr"]]),
                   int.from_bytes(view[_RANGE["port"]], "big"),
                   int.from_bytes(view[_RANGE["from_seq"]], "big"),
                   int.from_bytes(view[_RANGE["to_seq"]], "big"))
    if ptype == KEEPALIVE:
        return Keepalive(socket.inet_ntoa(view[_KEEPALIVE["addr"]]),
                         int.from_bytes(view[_KEEPALIVE["port"]], "big"),
                         int.from_bytes(view[_KEEPALIVE["flags"]], "big"),
                         bytes(view[_KEEPALIVE["token"]]))
    if ptype == QUERY:
        return Query(bytes(view[_QUERY["token"]]))
    if ptype == INFO:
        return _decode_info(view)
    return KeepaliveAck(bytes(view[_ACK["token"]]))


def _decode_info(view):
    """An INFO that _validate() accepted: COUNT member slots read, the rest ignored."""
    first = _INFO["members"].start
    slots = [view[first + k * MEMBER_SIZE:first + (k + 1) * MEMBER_SIZE]
             for k in range(view[_INFO["count"].start])]
    return Info(bytes(view[_INFO["token"]]), int.from_bytes(view[_INFO["epoch"]], "big"),
                socket.inet_ntoa(view[_INFO["addr"]]), int.from_bytes(view[_INFO["port"]], "big"),
                view[_INFO["flags"].start],
                tuple((socket.inet_ntoa(slot[:4]), int.from_bytes(slot[4:], "big")) for slot in slots))


def decode_pack(data, max_data=MAX_DATA):
    """Decode a datagram that may be packed (several DELIVER or several PUSH frames back to
    back); return a list of packets. Any single valid packet is a list of one."""
    view = memoryview(data).cast("B")
    try:
        return [decode(view, max_data)]
    except LengthMismatch:
        if view[0] not in (DELIVER, PUSH):
            raise
    ptype, n, off, out = view[0], len(view), 0, []
    while off < n:
        if n - off < HEADER_SIZE or view[off] != ptype:
            raise LengthMismatch(f"the frames' LENGTHs do not tile the {n}-byte datagram")
        length = int.from_bytes(view[off + 1:off + 3], "big")  # LENGTH, as in _DATA
        if length > max_data:
            raise OversizePacket(f"a frame's DATA exceeds the limit of {max_data}")
        data_view = view[off + HEADER_SIZE:off + HEADER_SIZE + length]
        if ptype == DELIVER:
            out.append(Deliver(int.from_bytes(view[off + 3:off + HEADER_SIZE], "big"), data_view))
        else:
            out.append(Push(data_view))
        off += HEADER_SIZE + length
    if off != n:
        raise LengthMismatch(f"the frames' LENGTHs do not tile the {n}-byte datagram")
    return out


def encode_pack(packets, max_datagram=MAX_DATAGRAM):
    """Concatenate DELIVER or PUSH packets (all of one type) into one packed datagram."""
    if not packets:
        raise InvalidField("a pack holds at least one frame")
    kind = type(packets[0])
    if kind not in (Deliver, Push):
        raise InvalidField(f"only DELIVER or PUSH frames can be packed, not {kind.__name__}")
    if any(type(packet) is not kind for packet in packets):
        raise InvalidField("a pack holds frames of one type")
    out = b"".join(encode(packet) for packet in packets)
    if len(out) > max_datagram:
        raise OversizePacket(f"pack of {len(out)} bytes exceeds the limit of {max_datagram}")
    return out


def pack_pushes(datas, limit=DEFAULT_PACK_LIMIT, max_data=MAX_DATA, max_frames=1024):
    """PUSH frames for `datas`, packed greedily in order into datagrams of at most `limit` bytes
    and `max_frames` frames (a frame larger than `limit` travels alone); return the datagrams."""
    out, current, used = [], [], 0
    for data in datas:
        frame = encode_push(data, max_data)
        if current and (used + len(frame) > limit or len(current) >= max_frames):
            out.append(b"".join(current))
            current, used = [], 0
        current.append(frame)
        used += len(frame)
    if current:
        out.append(b"".join(current))
    return out


def unpack_into(data, sequences, offsets, lengths, max_data=MAX_DATA):
    """Index a DELIVER datagram, packed or not, without a Python object per message: frame k's
    SEQUENCE goes to sequences[k] and its DATA is data[offsets[k]:offsets[k] + lengths[k]].
    The three are writable buffers of uint64, uint32 and uint32 (numpy arrays, array('Q'/'I'));
    return the frame count. Raises CodecError for anything but valid DELIVER frames and
    BufferTooSmall when the arrays are shorter than the frame count."""
    view = memoryview(data).cast("B")
    frames = decode_pack(view, max_data)
    if view[0] != DELIVER:
        raise InvalidField(f"not a DELIVER datagram (type 0x{view[0]:02x})")
    seqs, offs, lens = (memoryview(a).cast("B").cast(c) for a, c in
                        ((sequences, "Q"), (offsets, "I"), (lengths, "I")))
    if len(frames) > min(len(seqs), len(offs), len(lens)):
        raise BufferTooSmall(f"{len(frames)} frames do not fit arrays of {min(len(seqs), len(offs), len(lens))}")
    off = 0
    for k, frame in enumerate(frames):
        seqs[k], offs[k], lens[k] = frame.sequence, off + HEADER_SIZE, len(frame.data)
        off += HEADER_SIZE + len(frame.data)
    return len(frames)
