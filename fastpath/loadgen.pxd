cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint64_t, int64_t

cdef extern from "include/loadstats.h" nogil:
    enum:
        LS_STAMP_SIZE
        LS_MAX_PUBLISHERS
        LS_WINDOW
        LS_BUCKETS
    ctypedef struct ls_histogram:
        uint64_t counts[1]
        uint64_t total
        uint64_t max
        uint64_t min
        double sum
    ctypedef struct ls_stream:
        int started
        uint64_t highest
        uint64_t unique
        uint64_t duplicates
        uint64_t reordered
        uint64_t too_old
    ctypedef struct ls_counter:
        ls_stream streams[1]
        uint64_t foreign
        ls_histogram latency
    uint64_t ls_now_ns()
    void ls_stamp(uint8_t* payload, uint16_t pub_id, uint64_t counter, uint64_t now_ns)
    void ls_hist_init(ls_histogram* h)
    void ls_hist_record(ls_histogram* h, uint64_t v)
    void ls_hist_merge(ls_histogram* into, const ls_histogram* src)
    uint64_t ls_hist_quantile(const ls_histogram* h, double q)
    uint64_t ls_bucket_high(int b)
    int ls_bucket(uint64_t v)
    void ls_counter_init(ls_counter* c)
    void ls_counter_init_zeroed(ls_counter* c)
    void ls_counter_prefault(ls_counter* c)
    int64_t ls_counter_record(ls_counter* c, const uint8_t* payload, size_t length, uint64_t now_ns)


@cython.final
cdef class LatencyHistogram:
    cdef ls_histogram h


@cython.final
cdef class StreamCounter:
    cdef ls_counter* c
