from libc.stdint cimport uint8_t, uint64_t

# Packet types, sizes, field offsets, FLAGS bits and limits: the wire table in packets.py.
include "packets.pxi"

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
