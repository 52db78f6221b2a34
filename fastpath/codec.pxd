from libc.stdint cimport uint8_t, uint64_t

# Packet types, sizes, field offsets, FLAGS bits and limits: the wire table in packets.py.
include "packets.pxi"

# Why classify() rejected a datagram (returned as the negative of one of these): the first
# drop reasons of the table, so a fault indexes the backbone's drops[] directly.
cdef enum:
    FAULT_TRUNCATED = DROP_TRUNCATED
    FAULT_LENGTH_MISMATCH = DROP_LENGTH_MISMATCH
    FAULT_UNKNOWN_TYPE = DROP_UNKNOWN_TYPE
    FAULT_OVERSIZE = DROP_OVERSIZE
    FAULT_INVALID_FIELD = DROP_INVALID_FIELD
    CODEC_FAULTS = DROP_INVALID_FIELD + 1

cdef int classify(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) noexcept nogil
cdef int raise_fault(int fault, const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) except -1
cdef Py_ssize_t count_frames(const uint8_t* p, Py_ssize_t n, Py_ssize_t max_data) noexcept nogil
