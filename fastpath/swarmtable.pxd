cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from cpython cimport array


@cython.final
cdef class ConnectionTable:
    """The swarm connection table in C (pelotari.swarm.table's twin): one array per field, 18
    packed address bytes per slot, an open-addressing index of u32 slots."""
    cdef readonly uint32_t capacity
    cdef readonly uint32_t count
    # the fields, as in pelotari.swarm.table.FIELDS (Python sees them as arrays)
    cdef readonly array.array state, attempts, missed, rtt, their, heard, due, pinged, bucket
    cdef readonly array.array claimed, prev, next
    cdef readonly set direct             # slots of direct records
    cdef readonly object addresses       # AddressView: addresses[slot] -> (host, port) or None
    cdef list _heap                      # (due ms, slot), lazily invalidated
    cdef list _pins                      # memoryviews: the arrays cannot be resized under us
    cdef dict _odd                       # addresses that do not pack (see _pack) -> slot
    cdef dict _odd_at                    # slot -> such an address
    cdef uint32_t _head, _tail           # the LRU list of evictable records
    cdef uint32_t _isize                 # index buckets (at least 4/3 capacity)
    cdef uint64_t _hseed                 # the index's hash seed (per table)
    cdef uint32_t* _index                # bucket -> slot, or NIL (empty)
    cdef uint8_t* _addr                  # 18 bytes a slot: 16 address + u16 port
    # the arrays' data
    cdef uint16_t* _st
    cdef uint8_t* _att
    cdef uint8_t* _mis
    cdef uint16_t* _rtt
    cdef uint64_t* _thr
    cdef uint32_t* _hrd
    cdef uint32_t* _due
    cdef uint32_t* _png
    cdef uint32_t* _bkt
    cdef uint8_t* _clm
    cdef uint32_t* _prv
    cdef uint32_t* _nxt

    cdef int _pack(self, object address, uint8_t* key) except -1
    cdef uint32_t _home(self, const uint8_t* key) noexcept nogil
    cdef uint32_t _find(self, const uint8_t* key) noexcept nogil
    cdef void _index_drop(self, uint32_t slot) noexcept nogil
    cdef void _index_retarget(self, uint32_t src, uint32_t dst) noexcept nogil
    cdef object _address(self, uint32_t slot)
    cdef int _slot_ok(self, Py_ssize_t slot) except -1
    cdef int _link_tail(self, uint32_t slot) except -1
    cdef int _link_head(self, uint32_t slot) except -1
    cdef int _unlink(self, uint32_t slot) except -1
    cdef int _move(self, uint32_t src, uint32_t dst) except -1
    cdef void _rebuild_heap(self)
