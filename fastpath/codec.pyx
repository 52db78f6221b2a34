# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython codec for the fyrehose packet types: the seed's six and the backbone-cluster
extension's QUERY and INFO (big-endian, byte-exact to the seed and to docs/protocols/fyrehose.md).

Buffers other than bytes (read) and bytearray (written) are held as typed memoryviews
(`const uint8_t[::1]`), released when they go out of scope; bytes and bytearray are read in place,
since making a memoryview of one costs more than the rest of a decode (bench/micro). Reads on
behalf of Python go through rb_at() (bounds-checked), so bounds checking of `view[i]` is off.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from fastpath.wire cimport (get_u16, get_u32, get_u48, get_u64, put_u16, put_u32, put_u48,
                            put_u64, ReadBuffer, rb_at)

import socket

from fastpath.errors import (BufferTooSmall, InvalidField, LengthMismatch, OversizePacket,
                             TruncatedPacket, UnknownPacketType)
from fastpath.packets import Deliver, Forward, Info, Keepalive, KeepaliveAck, Push, Query, Request
from fastpath.packets import DEFAULT_PACK_LIMIT as _PY_DEFAULT_PACK_LIMIT
from fastpath.packets import FIXED_SIZES as _PY_FIXED_SIZES


cdef uint64_t SEQ_MASK = (<uint64_t>1 << 48) - 1
# The exact size of each fixed-size packet type by its type byte (0: not one), from the table.
cdef Py_ssize_t FIXED_SIZE[256]
for _code, _size in _PY_FIXED_SIZES.items():
    FIXED_SIZE[_code] = _size
del _code, _size


cdef int classify(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) noexcept nogil:
    """Validate a whole datagram; return its type, or -CodecFault."""
    cdef int ptype
    cdef Py_ssize_t size
    if n < 1:
        return -FAULT_TRUNCATED
    ptype = p[0]
    if ptype == T_DELIVER or ptype == T_PUSH:
        if n < HEADER_SIZE:
            return -FAULT_TRUNCATED
        if n - HEADER_SIZE > max_data:
            return -FAULT_OVERSIZE
        if get_u16(p + OFF_LENGTH) != n - HEADER_SIZE:
            return -FAULT_LENGTH_MISMATCH
        return ptype
    size = FIXED_SIZE[ptype]
    if size == 0:
        return -FAULT_UNKNOWN_TYPE
    if n < size:
        return -FAULT_TRUNCATED
    if n != size:
        return -FAULT_LENGTH_MISMATCH
    if ((ptype == T_REQUEST or ptype == T_FORWARD)
            and get_u48(p + OFF_FROM_SEQ) > get_u48(p + OFF_TO_SEQ)):
        return -FAULT_INVALID_FIELD
    if ptype == T_INFO and p[OFF_INFO_COUNT] > MAX_MEMBERS:
        return -FAULT_INVALID_FIELD
    return ptype


cdef Py_ssize_t count_frames(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) noexcept nogil:
    """Validate a DELIVER or PUSH datagram that may hold several frames of its first frame's type
    back to back (the packing extension); return the frame count, or -CodecFault. A datagram
    classify() accepts is one frame; frames must tile the datagram exactly."""
    cdef int ptype
    cdef Py_ssize_t off = 0, count = 0, length
    if n < 1:
        return -FAULT_TRUNCATED
    ptype = p[0]
    if ptype != T_DELIVER and ptype != T_PUSH:
        return -FAULT_UNKNOWN_TYPE
    if n < HEADER_SIZE:
        return -FAULT_TRUNCATED
    while off < n:
        if n - off < HEADER_SIZE or p[off] != ptype:
            return -FAULT_LENGTH_MISMATCH
        length = get_u16(p + off + OFF_LENGTH)
        if length > max_data:
            return -FAULT_OVERSIZE
        off += HEADER_SIZE + length
        count += 1
    return count if off == n else -FAULT_LENGTH_MISMATCH


cdef int raise_fault(int fault, const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) except -1:
    if fault == FAULT_TRUNCATED:
        if n == 0:
            raise TruncatedPacket("empty datagram")
        raise TruncatedPacket(f"{n}-byte datagram is shorter than the 0x{p[0]:x} packet's header")
    if fault == FAULT_OVERSIZE:
        raise OversizePacket(f"DATA of {n - HEADER_SIZE} bytes exceeds the limit of {max_data}")
    if fault == FAULT_LENGTH_MISMATCH:
        if p[0] == T_DELIVER or p[0] == T_PUSH:
            raise LengthMismatch(
                f"LENGTH says {get_u16(p + OFF_LENGTH)} bytes of DATA, datagram carries {n - HEADER_SIZE}")
        raise LengthMismatch(f"0x{p[0]:x} packet is fixed-size; datagram has {n} bytes")
    if fault == FAULT_UNKNOWN_TYPE:
        raise UnknownPacketType(f"unknown packet type 0x{p[0]:02x}")
    if fault == FAULT_INVALID_FIELD and p[0] == T_INFO:
        raise InvalidField(f"COUNT {p[OFF_INFO_COUNT]} is more than the {MAX_MEMBERS} member slots")
    if fault == FAULT_INVALID_FIELD:
        raise InvalidField(
            f"FROM_SEQ {get_u48(p + OFF_FROM_SEQ)} is after TO_SEQ {get_u48(p + OFF_TO_SEQ)}")
    raise InvalidField("malformed datagram")


cdef inline bint _bytes_span(obj, ReadBuffer* rb) noexcept:
    """Point rb at a bytes object's contents; False (rb untouched) for any other buffer, which
    the caller then holds in its own typed memoryview (a helper returning one: 20 ns more)."""
    if type(obj) is not bytes:
        return False
    rb.buf = <const uint8_t*>PyBytes_AS_STRING(obj)
    rb.len = PyBytes_GET_SIZE(obj)
    return True


cdef inline str _addr_str(uint32_t a):
    return f"{a >> 24}.{(a >> 16) & 0xff}.{(a >> 8) & 0xff}.{a & 0xff}"


cdef uint32_t _addr_u32(addr) except? 0xffffffff:
    cdef bytes packed
    if not addr:
        return 0
    try:
        packed = socket.inet_aton(addr)
    except (OSError, TypeError):
        raise InvalidField(f"ADDR {addr!r} is not an IPv4 address") from None
    if len(packed) != 4:
        raise InvalidField(f"ADDR {addr!r} is not an IPv4 address")
    return get_u32(<const uint8_t*>PyBytes_AS_STRING(packed))


cdef uint64_t _u48(value, str field) except? 0xffffffffffffffff:
    if not 0 <= value <= SEQ_MASK:
        raise InvalidField(f"{field} {value} does not fit in 48 bits")
    return <uint64_t>value


cdef uint16_t _port(value) except? 0xffff:
    if not 0 <= value <= 0xffff:
        raise InvalidField(f"PORT {value} is outside 0..65535")
    return <uint16_t>value


cdef uint64_t _u64(value, str field) except? 0xffffffffffffffff:
    if not 0 <= value <= 0xffffffffffffffff:
        raise InvalidField(f"{field} {value} does not fit in 64 bits")
    return <uint64_t>value


cdef uint8_t _u8(value, str field) except? 0xff:
    if not 0 <= value <= 0xff:
        raise InvalidField(f"{field} {value} does not fit in 8 bits")
    return <uint8_t>value


@cython.final
cdef class _Writer:
    """Where the *_into encoders write: `out`, inside buf (no Python code runs until written)."""
    cdef uint8_t[::1] view  # holds a writable buffer that is not a bytearray
    cdef uint8_t* out

    def __cinit__(self, buf, Py_ssize_t offset, Py_ssize_t need):
        cdef Py_ssize_t size
        if type(buf) is bytearray:
            self.out = <uint8_t*>PyByteArray_AS_STRING(buf)
            size = PyByteArray_GET_SIZE(buf)
        else:
            self.view = buf
            self.out = &self.view[0]
            size = self.view.shape[0]
        if offset < 0 or need > size - offset:
            raise BufferTooSmall(
                f"packet of {need} bytes does not fit at offset {offset} of a {size}-byte buffer")
        self.out += offset


cdef inline void _write_data_packet(uint8_t* out, int ptype, uint64_t seq,
                                    const ReadBuffer* src) noexcept:
    out[0] = <uint8_t>ptype
    put_u16(out + OFF_LENGTH, <uint16_t>src.len)
    put_u48(out + OFF_SEQUENCE, seq)
    if src.len:
        memcpy(out + HEADER_SIZE, src.buf, src.len)


cdef int _check_data(Py_ssize_t n, Py_ssize_t max_data) except -1:
    if n > max_data:
        raise OversizePacket(f"DATA of {n} bytes exceeds the limit of {max_data}")
    return 0


cdef object _data_packet(int ptype, uint64_t seq, data, Py_ssize_t max_data, buf=None,
                         Py_ssize_t offset=0):
    """Write the datagram into buf at offset and return its size; without buf, return it as a
    new bytes object, written in place (one allocation, one copy)."""
    cdef const uint8_t[::1] view  # holds a buffer other than bytes until return
    cdef ReadBuffer src
    cdef bytes out
    if not _bytes_span(data, &src):
        view = data
        src.buf, src.len = &view[0], view.shape[0]
    _check_data(src.len, max_data)
    if buf is None:
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + src.len)
        _write_data_packet(<uint8_t*>PyBytes_AS_STRING(out), ptype, seq, &src)
        return out
    cdef _Writer w = _Writer(buf, offset, HEADER_SIZE + src.len)
    _write_data_packet(w.out, ptype, seq, &src)
    return HEADER_SIZE + src.len


def encode_deliver_into(buf, Py_ssize_t offset, sequence, data, Py_ssize_t max_data=MAX_DATA):
    """Write a DELIVER into buf at offset; return the number of bytes written."""
    return _data_packet(T_DELIVER, _u48(sequence, "SEQUENCE"), data, max_data, buf, offset)


def encode_push_into(buf, Py_ssize_t offset, data, Py_ssize_t max_data=MAX_DATA):
    """Write a PUSH (UNUSED zeroed) into buf at offset; return the number of bytes written."""
    return _data_packet(T_PUSH, 0, data, max_data, buf, offset)


def encode_deliver(sequence, data, Py_ssize_t max_data=MAX_DATA):
    """Return a DELIVER datagram."""
    return _data_packet(T_DELIVER, _u48(sequence, "SEQUENCE"), data, max_data)


def encode_push(data, Py_ssize_t max_data=MAX_DATA):
    """Return a PUSH datagram."""
    return _data_packet(T_PUSH, 0, data, max_data)


cdef Py_ssize_t _encode_range(int ptype, buf, Py_ssize_t offset, addr, port,
                              from_seq, to_seq) except -1:
    cdef uint32_t a = _addr_u32(addr)
    cdef uint16_t pt = _port(port)
    cdef uint64_t lo = _u48(from_seq, "FROM_SEQ")
    cdef uint64_t hi = _u48(to_seq, "TO_SEQ")
    if lo > hi:
        raise InvalidField(f"FROM_SEQ {lo} is after TO_SEQ {hi}")
    cdef _Writer w = _Writer(buf, offset, RANGE_SIZE)
    w.out[0] = <uint8_t>ptype
    put_u32(w.out + OFF_ADDR, a)
    put_u16(w.out + OFF_PORT, pt)
    put_u48(w.out + OFF_FROM_SEQ, lo)
    put_u48(w.out + OFF_TO_SEQ, hi)
    return RANGE_SIZE


def encode_request_into(buf, Py_ssize_t offset, addr, port, from_seq, to_seq):
    """Write a REQUEST into buf at offset; return the number of bytes written."""
    return _encode_range(T_REQUEST, buf, offset, addr, port, from_seq, to_seq)


def encode_forward_into(buf, Py_ssize_t offset, addr, port, from_seq, to_seq):
    """Write a FORWARD into buf at offset; return the number of bytes written."""
    return _encode_range(T_FORWARD, buf, offset, addr, port, from_seq, to_seq)


def encode_request(addr, port, from_seq, to_seq):
    """Return a REQUEST datagram (FROM_SEQ..TO_SEQ inclusive)."""
    out = bytearray(RANGE_SIZE)
    _encode_range(T_REQUEST, out, 0, addr, port, from_seq, to_seq)
    return bytes(out)


def encode_forward(addr, port, from_seq, to_seq):
    """Return a FORWARD datagram (FROM_SEQ..TO_SEQ inclusive)."""
    out = bytearray(RANGE_SIZE)
    _encode_range(T_FORWARD, out, 0, addr, port, from_seq, to_seq)
    return bytes(out)


cdef int _copy_token(token, uint8_t* dst) except -1:
    """Copy a TOKEN_SIZE-byte buffer to dst; InvalidField for any other size."""
    cdef const uint8_t[::1] view  # holds a buffer other than bytes until return
    cdef ReadBuffer rb
    if not _bytes_span(token, &rb):
        view = token
        rb.buf, rb.len = &view[0], view.shape[0]
    if rb.len != TOKEN_SIZE:
        raise InvalidField(f"TOKEN must be {TOKEN_SIZE} bytes, got {rb.len}")
    memcpy(dst, rb.buf, TOKEN_SIZE)
    return 0


def encode_keepalive_into(buf, Py_ssize_t offset, addr, port, flags, token):
    """Write a KEEPALIVE into buf at offset; return the number of bytes written."""
    cdef uint32_t a = _addr_u32(addr)
    cdef uint16_t pt = _port(port)
    cdef uint64_t fl = _u48(flags, "FLAGS")
    cdef uint8_t t[TOKEN_SIZE]
    _copy_token(token, t)
    cdef _Writer w = _Writer(buf, offset, KEEPALIVE_SIZE)
    w.out[0] = T_KEEPALIVE
    put_u32(w.out + OFF_ADDR, a)
    put_u16(w.out + OFF_PORT, pt)
    put_u48(w.out + OFF_FLAGS, fl)
    memcpy(w.out + OFF_KEEPALIVE_TOKEN, t, TOKEN_SIZE)
    return KEEPALIVE_SIZE


def encode_keepalive(addr, port, flags, token):
    """Return a KEEPALIVE datagram."""
    out = bytearray(KEEPALIVE_SIZE)
    encode_keepalive_into(out, 0, addr, port, flags, token)
    return bytes(out)


def encode_keepalive_ack_into(buf, Py_ssize_t offset, token):
    """Write a KEEPALIVE-ACK into buf at offset; return the number of bytes written."""
    cdef uint8_t t[TOKEN_SIZE]
    _copy_token(token, t)
    cdef _Writer w = _Writer(buf, offset, KEEPALIVE_ACK_SIZE)
    w.out[0] = T_KEEPALIVE_ACK
    memcpy(w.out + OFF_KEEPALIVE_ACK_TOKEN, t, TOKEN_SIZE)
    return KEEPALIVE_ACK_SIZE


def encode_keepalive_ack(token):
    """Return a KEEPALIVE-ACK datagram."""
    out = bytearray(KEEPALIVE_ACK_SIZE)
    encode_keepalive_ack_into(out, 0, token)
    return bytes(out)


def encode_query_into(buf, Py_ssize_t offset, token):
    """Write a QUERY (cluster extension; PADDING zeroed) into buf at offset; return its size."""
    cdef uint8_t t[TOKEN_SIZE]
    _copy_token(token, t)
    cdef _Writer w = _Writer(buf, offset, QUERY_SIZE)
    memset(w.out, 0, QUERY_SIZE)
    w.out[0] = T_QUERY
    memcpy(w.out + OFF_QUERY_TOKEN, t, TOKEN_SIZE)
    return QUERY_SIZE


def encode_query(token):
    """Return a QUERY datagram (cluster extension): 64 bytes, PADDING zeroed."""
    out = bytearray(QUERY_SIZE)
    encode_query_into(out, 0, token)
    return bytes(out)


def encode_info_into(buf, Py_ssize_t offset, token, epoch, addr, port, flags, members=()):
    """Write an INFO (cluster extension; `members` ((addr, port), ...), at most 5; unused slots
    and PADDING zeroed) into buf at offset; return its size."""
    cdef uint8_t t[TOKEN_SIZE]
    cdef uint8_t slots[MAX_MEMBERS * MEMBER_SIZE]
    cdef uint64_t e
    cdef uint32_t a
    cdef uint16_t pt
    cdef uint8_t fl, count
    cdef Py_ssize_t k
    _copy_token(token, t)
    e = _u64(epoch, "EPOCH")
    a = _addr_u32(addr)
    pt = _port(port)
    fl = _u8(flags, "FLAGS")
    members = tuple(members)
    if len(members) > MAX_MEMBERS:
        raise InvalidField(f"INFO lists at most {MAX_MEMBERS} members, got {len(members)}")
    count = <uint8_t>len(members)
    memset(slots, 0, MAX_MEMBERS * MEMBER_SIZE)
    for k, member in enumerate(members):
        try:
            member_addr, member_port = member
        except (TypeError, ValueError):
            raise InvalidField(f"a member is (addr, port), not {member!r}") from None
        put_u32(slots + k * MEMBER_SIZE, _addr_u32(member_addr))
        put_u16(slots + k * MEMBER_SIZE + 4, _port(member_port))
    cdef _Writer w = _Writer(buf, offset, INFO_SIZE)
    w.out[0] = T_INFO
    memcpy(w.out + OFF_INFO_TOKEN, t, TOKEN_SIZE)
    put_u64(w.out + OFF_INFO_EPOCH, e)
    put_u32(w.out + OFF_INFO_ADDR, a)
    put_u16(w.out + OFF_INFO_PORT, pt)
    w.out[OFF_INFO_FLAGS] = fl
    w.out[OFF_INFO_COUNT] = count
    memcpy(w.out + OFF_INFO_MEMBERS, slots, MAX_MEMBERS * MEMBER_SIZE)
    memset(w.out + OFF_INFO_PADDING, 0, INFO_SIZE - OFF_INFO_PADDING)
    return INFO_SIZE


def encode_info(token, epoch, addr, port, flags, members=()):
    """Return an INFO datagram (cluster extension): 64 bytes, whatever the member count."""
    out = bytearray(INFO_SIZE)
    encode_info_into(out, 0, token, epoch, addr, port, flags, members)
    return bytes(out)


def encode(packet, Py_ssize_t max_data=MAX_DATA):
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


def packet_type(data):
    """Return the type byte of a datagram after validating it, raising CodecError if invalid."""
    cdef const uint8_t[::1] view  # holds a buffer other than bytes until return
    cdef ReadBuffer rb
    if not _bytes_span(data, &rb):
        view = data
        rb.buf, rb.len = &view[0], view.shape[0]
    cdef int rc = classify(rb.buf, rb.len, MAX_DATA)
    if rc < 0:
        raise_fault(-rc, rb.buf, rb.len, MAX_DATA)
    return rc


def decode(data, Py_ssize_t max_data=MAX_DATA):
    """Decode one datagram; DELIVER/PUSH DATA is a zero-copy memoryview of the input."""
    cdef const uint8_t[::1] view  # holds a buffer other than bytes until return
    cdef ReadBuffer rb
    cdef int rc
    if not _bytes_span(data, &rb):
        view = data
        rb.buf, rb.len = &view[0], view.shape[0]
    rc = classify(rb.buf, rb.len, max_data)
    if rc < 0:
        raise_fault(-rc, rb.buf, rb.len, max_data)
    # tuple.__new__ skips the NamedTuple's Python-level __new__ (about 40% of a decode).
    if rc == T_DELIVER:
        return tuple.__new__(Deliver, (get_u48(rb_at(&rb, OFF_SEQUENCE, 6)),
                                       memoryview(data)[HEADER_SIZE:]))
    if rc == T_PUSH:
        rb_at(&rb, 0, HEADER_SIZE)
        return tuple.__new__(Push, (memoryview(data)[HEADER_SIZE:],))
    if rc == T_REQUEST or rc == T_FORWARD:
        cls = Request if rc == T_REQUEST else Forward
        return tuple.__new__(cls, (
            _addr_str(get_u32(rb_at(&rb, OFF_ADDR, 4))), get_u16(rb_at(&rb, OFF_PORT, 2)),
            get_u48(rb_at(&rb, OFF_FROM_SEQ, 6)), get_u48(rb_at(&rb, OFF_TO_SEQ, 6))))
    if rc == T_KEEPALIVE:
        return tuple.__new__(Keepalive, (
            _addr_str(get_u32(rb_at(&rb, OFF_ADDR, 4))), get_u16(rb_at(&rb, OFF_PORT, 2)),
            get_u48(rb_at(&rb, OFF_FLAGS, 6)),
            PyBytes_FromStringAndSize(<const char*>rb_at(&rb, OFF_KEEPALIVE_TOKEN, TOKEN_SIZE),
                                      TOKEN_SIZE)))
    if rc == T_QUERY:
        return tuple.__new__(Query, (
            PyBytes_FromStringAndSize(<const char*>rb_at(&rb, OFF_QUERY_TOKEN, TOKEN_SIZE),
                                      TOKEN_SIZE),))
    if rc == T_INFO:
        return _decode_info(&rb)
    return tuple.__new__(KeepaliveAck, (
        PyBytes_FromStringAndSize(<const char*>rb_at(&rb, OFF_KEEPALIVE_ACK_TOKEN, TOKEN_SIZE),
                                  TOKEN_SIZE),))


cdef object _decode_info(const ReadBuffer* rb):
    """An INFO that classify() accepted: COUNT member slots read, the rest ignored."""
    cdef Py_ssize_t k, count = rb_at(rb, OFF_INFO_COUNT, 1)[0]
    cdef const uint8_t* slot
    members = []
    for k in range(count):
        slot = rb_at(rb, OFF_INFO_MEMBERS + k * MEMBER_SIZE, MEMBER_SIZE)
        members.append((_addr_str(get_u32(slot)), get_u16(slot + 4)))
    return tuple.__new__(Info, (
        PyBytes_FromStringAndSize(<const char*>rb_at(rb, OFF_INFO_TOKEN, TOKEN_SIZE), TOKEN_SIZE),
        get_u64(rb_at(rb, OFF_INFO_EPOCH, 8)), _addr_str(get_u32(rb_at(rb, OFF_INFO_ADDR, 4))),
        get_u16(rb_at(rb, OFF_INFO_PORT, 2)), rb_at(rb, OFF_INFO_FLAGS, 1)[0], tuple(members)))


cdef Py_ssize_t _frame_count(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) except -1:
    """Frames in a valid datagram: 1 for any single packet, else a pack's count; raises the
    CodecError decode() or the packing rules give."""
    cdef int rc = classify(p, n, max_data)
    cdef Py_ssize_t count
    if rc > 0:
        return 1
    if rc != -FAULT_LENGTH_MISMATCH or (p[0] != T_DELIVER and p[0] != T_PUSH):
        raise_fault(-rc, p, n, max_data)
    count = count_frames(p, n, max_data)
    if count == -FAULT_OVERSIZE:
        raise OversizePacket(f"a frame's DATA exceeds the limit of {max_data}")
    if count < 0:
        raise LengthMismatch(f"the frames' LENGTHs do not tile the {n}-byte datagram")
    return count


def decode_pack(data, Py_ssize_t max_data=MAX_DATA):
    """Decode a datagram that may be packed (several DELIVER or several PUSH frames back to
    back); return a list of packets. Any single valid packet is a list of one."""
    cdef const uint8_t[::1] view  # holds a buffer other than bytes until return
    cdef ReadBuffer rb
    if not _bytes_span(data, &rb):
        view = data
        rb.buf, rb.len = &view[0], view.shape[0]
    cdef const uint8_t* p = rb.buf
    cdef Py_ssize_t n = rb.len, off = 0, length
    if _frame_count(p, n, max_data) == 1:
        return [decode(data, max_data)]
    whole = memoryview(data)
    out = []
    while off < n:
        length = get_u16(p + off + OFF_LENGTH)
        if p[0] == T_DELIVER:
            out.append(tuple.__new__(Deliver, (
                get_u48(p + off + OFF_SEQUENCE), whole[off + HEADER_SIZE:off + HEADER_SIZE + length])))
        else:
            out.append(tuple.__new__(Push, (whole[off + HEADER_SIZE:off + HEADER_SIZE + length],)))
        off += HEADER_SIZE + length
    return out


def encode_pack(packets, Py_ssize_t max_datagram=MAX_DATAGRAM):
    """Concatenate DELIVER or PUSH packets (all of one type) into one packed datagram."""
    if not packets:
        raise InvalidField("a pack holds at least one frame")
    kind = type(packets[0])
    if kind is not Deliver and kind is not Push:
        raise InvalidField(f"only DELIVER or PUSH frames can be packed, not {kind.__name__}")
    frames = []
    for packet in packets:
        if type(packet) is not kind:
            raise InvalidField("a pack holds frames of one type")
        frames.append(encode(packet))
    out = b"".join(frames)
    if len(out) > max_datagram:
        raise OversizePacket(f"pack of {len(out)} bytes exceeds the limit of {max_datagram}")
    return out


def pack_pushes(datas, Py_ssize_t limit=_PY_DEFAULT_PACK_LIMIT, Py_ssize_t max_data=MAX_DATA,
                Py_ssize_t max_frames=1024):
    """PUSH frames for `datas`, packed greedily in order into datagrams of at most `limit` bytes
    and `max_frames` frames (a frame larger than `limit` travels alone); return the datagrams."""
    cdef Py_ssize_t used = 0, size
    out = []
    current = []
    for data in datas:
        frame = encode_push(data, max_data)
        size = len(frame)
        if current and (used + size > limit or len(current) >= max_frames):
            out.append(b"".join(current))
            current = []
            used = 0
        current.append(frame)
        used += size
    if current:
        out.append(b"".join(current))
    return out


def unpack_into(data, sequences, offsets, lengths, Py_ssize_t max_data=MAX_DATA):
    """Index a DELIVER datagram, packed or not, without a Python object per message: frame k's
    SEQUENCE goes to sequences[k] and its DATA is data[offsets[k]:offsets[k] + lengths[k]].
    The three are writable buffers of uint64, uint32 and uint32 (numpy arrays, array('Q'/'I'));
    return the frame count. Raises CodecError for anything but valid DELIVER frames and
    BufferTooSmall when the arrays are shorter than the frame count."""
    cdef const uint8_t[::1] view  # holds a buffer other than bytes until return
    cdef ReadBuffer rb
    if not _bytes_span(data, &rb):
        view = data
        rb.buf, rb.len = &view[0], view.shape[0]
    cdef uint64_t[::1] seqs = sequences
    cdef uint32_t[::1] offs = offsets
    cdef uint32_t[::1] lens = lengths
    cdef const uint8_t* p = rb.buf
    cdef Py_ssize_t n = rb.len, off = 0, count, k = 0, length
    count = _frame_count(p, n, max_data)
    if p[0] != T_DELIVER:
        raise InvalidField(f"not a DELIVER datagram (type 0x{p[0]:02x})")
    if count > seqs.shape[0] or count > offs.shape[0] or count > lens.shape[0]:
        raise BufferTooSmall(f"{count} frames do not fit arrays of {min(seqs.shape[0], offs.shape[0], lens.shape[0])}")
    with nogil:
        while off < n:
            length = get_u16(p + off + OFF_LENGTH)
            seqs[k] = get_u48(p + off + OFF_SEQUENCE)
            offs[k] = <uint32_t>(off + HEADER_SIZE)
            lens[k] = <uint32_t>length
            off += HEADER_SIZE + length
            k += 1
    return count
