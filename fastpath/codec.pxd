from libc.stdint cimport uint8_t, uint64_t

cdef enum:
    T_DELIVER = 0x01
    T_PUSH = 0x02
    T_REQUEST = 0x04
    T_FORWARD = 0x08
    T_KEEPALIVE = 0x10
    T_KEEPALIVE_ACK = 0x20

cdef enum:
    HEADER_SIZE = 9
    RANGE_SIZE = 19
    KEEPALIVE_SIZE = 29
    KEEPALIVE_ACK_SIZE = 17
    TOKEN_SIZE = 16
    MAX_DATA = 65498
    MAX_DATAGRAM = 65507

# Packing extension: KEEPALIVE FLAGS bit and the pack limit carried in bits 16..31.
cdef enum:
    F_PACKED = 0x4
    PACK_LIMIT_SHIFT = 16
    DEFAULT_PACK_LIMIT = 1472

# Why classify() rejected a datagram (returned as the negative of one of these).
cdef enum:
    FAULT_TRUNCATED = 1
    FAULT_LENGTH_MISMATCH = 2
    FAULT_UNKNOWN_TYPE = 3
    FAULT_OVERSIZE = 4
    FAULT_INVALID_FIELD = 5
    CODEC_FAULTS = 6

cdef int classify(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) noexcept nogil
cdef int raise_fault(int fault, const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) except -1
cdef Py_ssize_t count_frames(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) noexcept nogil
