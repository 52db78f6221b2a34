# Big-endian field access for fyrehose datagrams. Every read the codec does on behalf of
# Python goes through rb_at(), which checks bounds and raises TruncatedPacket; the nogil
# backbone loop validates the whole datagram once with codec.classify() and then reads at
# offsets that check has proven to be in range.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t


cdef inline uint16_t get_u16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t get_u32(const uint8_t* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
            | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline uint64_t get_u48(const uint8_t* p) noexcept nogil:
    return ((<uint64_t>p[0] << 40) | (<uint64_t>p[1] << 32) | (<uint64_t>p[2] << 24)
            | (<uint64_t>p[3] << 16) | (<uint64_t>p[4] << 8) | <uint64_t>p[5])


cdef inline uint64_t get_u64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>get_u32(p) << 32) | <uint64_t>get_u32(p + 4)


cdef inline void put_u16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v


cdef inline void put_u32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void put_u48(uint8_t* p, uint64_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 40)
    p[1] = <uint8_t>(v >> 32)
    p[2] = <uint8_t>(v >> 24)
    p[3] = <uint8_t>(v >> 16)
    p[4] = <uint8_t>(v >> 8)
    p[5] = <uint8_t>v


cdef inline void put_u64(uint8_t* p, uint64_t v) noexcept nogil:
    put_u32(p, <uint32_t>(v >> 32))
    put_u32(p + 4, <uint32_t>v)


cdef struct ReadBuffer:
    const uint8_t* buf
    Py_ssize_t len


cdef int raise_truncated(Py_ssize_t offset, Py_ssize_t n, Py_ssize_t length) except -1


cdef inline const uint8_t* rb_at(const ReadBuffer* rb, Py_ssize_t offset, Py_ssize_t n) except NULL:
    if offset < 0 or n < 0 or n > rb.len - offset:
        raise_truncated(offset, n, rb.len)
    return rb.buf + offset
