cimport cython
from libc.stdint cimport uint64_t, int64_t

@cython.final
cdef class Journal:
    cdef readonly Py_ssize_t capacity
    cdef uint64_t* seqs      # seq + 1 per slot; 0 = empty
    cdef list items
    cdef readonly Py_ssize_t count
    cpdef store(self, uint64_t seq, data)
    cpdef object get(self, uint64_t seq)


@cython.final
cdef class Gap:
    cdef readonly int64_t first
    cdef readonly int64_t last
    cdef readonly int attempts
    cdef readonly double next_try
    cdef readonly bint lost


@cython.final
cdef class GapTracker:
    cdef readonly bint started
    cdef int64_t next_pos          # next position to release (unwrapped 48-bit sequence)
    cdef int64_t highest           # highest position accepted
    cdef dict held                 # position -> data, for positions in (next_pos, highest]
    cdef list gaps                 # Gap, sorted, disjoint, all within [next_pos, highest]
    cdef list out                  # released items, in order
    cdef readonly int64_t max_gap
    cdef readonly Py_ssize_t max_held
    cdef readonly Py_ssize_t max_held_bytes
    cdef Py_ssize_t held_size      # DATA bytes in held
    cdef readonly int64_t max_request_range
    cdef readonly double request_delay
    cdef readonly double backoff
    cdef readonly int retries
    cdef public uint64_t duplicates
    cdef public uint64_t resets
    cdef public uint64_t lost_messages

    cdef int64_t unwrap(self, uint64_t seq)
    cdef void release(self)
    cdef bint lose_first(self)
    cdef void add_gap(self, int64_t first, int64_t last, double now)
    cdef void fill(self, int64_t pos)
    cdef void resync(self, uint64_t seq, int64_t pos)
