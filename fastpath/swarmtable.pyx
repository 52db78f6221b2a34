# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The swarm connection table in C: pelotari.swarm.table.ConnectionTable's twin, the same API
and semantics (SwarmNode works with either; PELOTARI_PURE_PYTHON=1 selects the pure one).

A connection is its 57-byte record and nothing else (docs/protocols/swarm.md, "State per
connection"): the fields are `array` objects of the pure table's type codes (Python indexes and
assigns `t.state[slot]` as before; C reads their buffers, pinned so they cannot be resized), the
address is 18 packed bytes a slot (16 for IPv6, or IPv4 as ::ffff:a.b.c.d, and the u16 port) and
the (host, port) index is open addressing over u32 slot numbers — linear probing, at least 4/3
as many buckets as the capacity (so at most 3/4 full: 5.3 bytes a connection), a seeded 64-bit
mix of the 18 bytes mapped onto the buckets by multiply-shift (any bucket count, not only powers
of two: a power of two would cost up to 10.7 bytes a connection), deletion by backward shift
(no tombstones). `addresses[slot]` builds the (host, port) tuple when asked.

A host packs when it is the text inet_ntop makes of its bytes (what the kernel and the swarm's
wire decoder produce: a dotted quad, or compressed lower-case IPv6, as ipaddress prints it) and
its port is within 0..65535; any other address ("::ffff:1.2.3.4" — that is a different key from
"1.2.3.4" — a scoped "fe80::1%eth0", a host name, upper-case hex, ...) is kept as given in a dict
on the side, so every key round-trips exactly as in the pure table.
"""
cimport cython
from cpython cimport array
from cpython.long cimport PyLong_Check, PyLong_CheckExact
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset, strlen

import array as _array
import os
from operator import index as operator_index
from heapq import heapify as heapq_heapify
from heapq import heappop as heapq_pop
from heapq import heappush as heapq_push

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_1BYTE_DATA(object s)

cdef extern from "<sys/socket.h>" nogil:
    int AF_INET
    int AF_INET6

cdef extern from "<arpa/inet.h>" nogil:
    int inet_pton(int af, const char* src, void* dst)
    const char* inet_ntop(int af, const void* src, char* dst, unsigned int size)

cdef enum:
    ADDR = 18       # packed address bytes a slot
    TEXT = 46       # INET6_ADDRSTRLEN

cdef uint32_t NIL_ = 0xFFFFFFFF
cdef uint16_t S_DIRECT_ = 0x0001

NIL = 0xFFFFFFFF
RECORD_BYTES = 57


class Full(Exception):
    """The table is full and holds nothing it may evict (every record is direct)."""


cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    """splitmix64's finaliser."""
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef inline bint mapped(const uint8_t* a) noexcept nogil:
    """a (16 bytes) is ::ffff:a.b.c.d"""
    cdef int i
    for i in range(10):
        if a[i]:
            return False
    return a[10] == 0xFF and a[11] == 0xFF


cdef inline int parse4(const char* s, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """1 when s[:n] is a dotted quad as inet_ntop writes it (no leading zeros), into out[4]."""
    cdef Py_ssize_t i = 0
    cdef int part, v, digits
    for part in range(4):
        if part:
            if i >= n or s[i] != 46:  # '.'
                return 0
            i += 1
        v = 0
        digits = 0
        while i < n and 48 <= s[i] <= 57:
            if digits and v == 0:
                return 0  # a leading zero
            v = v * 10 + (s[i] - 48)
            digits += 1
            i += 1
            if v > 255:
                return 0
        if not digits:
            return 0
        out[part] = <uint8_t>v
    return i == n


cdef inline Py_ssize_t format4(const uint8_t* a, char* out) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef int part, v
    for part in range(4):
        if part:
            out[i] = 46
            i += 1
        v = a[part]
        if v >= 100:
            out[i] = 48 + v // 100
            i += 1
        if v >= 10:
            out[i] = 48 + (v // 10) % 10
            i += 1
        out[i] = 48 + v % 10
        i += 1
    return i


cdef uint64_t _seed():
    return int.from_bytes(os.urandom(8), "little")


cdef array.array _zeros(str code, Py_ssize_t n):
    return array.clone(_array.array(code), n, zero=True)


@cython.final
cdef class AddressView:
    """`table.addresses`: addresses[slot] is the record's (host, port), None for a free slot
    (as the pure table's list of capacity entries)."""
    cdef ConnectionTable t

    def __len__(self):
        return self.t.capacity

    def __getitem__(self, i):
        cdef ConnectionTable t = self.t
        cdef Py_ssize_t k
        if PyLong_CheckExact(i):
            k = i
        elif isinstance(i, slice):
            return [self[k] for k in range(*i.indices(t.capacity))]
        else:
            k = operator_index(i)
        if k < 0:
            k += t.capacity
        if not 0 <= k < t.capacity:
            raise IndexError("list index out of range")
        if k >= t.count:
            return None
        return t._address(<uint32_t>k)


@cython.final
cdef class ConnectionTable:
    """Fixed-width connection records by slot, an index on (host, port), LRU eviction of
    non-direct records, a due-time heap and round-robin cursors."""


    def __cinit__(self, capacity):
        self._index = NULL
        self._addr = NULL

    def __init__(self, capacity):
        if not 1 <= capacity < NIL:
            raise ValueError("capacity must be within 1..2**32-2")
        cdef uint64_t cap = capacity
        cdef uint64_t isize = (cap * 4 + 2) // 3  # ceil(4/3 capacity): at most 3/4 full
        if isize <= cap:
            isize = cap + 1
        if isize >= NIL_:
            raise MemoryError("the index would need more than 2**32 buckets")
        if self._index != NULL:  # __init__ called again
            raise TypeError("a ConnectionTable is initialised once")
        self.capacity = <uint32_t>cap
        self.count = 0
        self._isize = <uint32_t>isize
        self._addr = <uint8_t*>PyMem_RawCalloc(cap, ADDR)
        self._index = <uint32_t*>PyMem_RawMalloc(isize * sizeof(uint32_t))
        if self._addr == NULL or self._index == NULL:
            raise MemoryError()
        memset(self._index, 0xFF, isize * sizeof(uint32_t))
        self._hseed = _seed()
        self.state = _zeros("H", cap)
        self.attempts = _zeros("B", cap)
        self.missed = _zeros("B", cap)
        self.rtt = _zeros("H", cap)
        self.their = _zeros("Q", cap)
        self.heard = _zeros("I", cap)
        self.due = _zeros("I", cap)
        self.pinged = _zeros("I", cap)
        self.bucket = _zeros("I", cap)
        self.claimed = _zeros("B", cap)
        self.prev = _zeros("I", cap)
        self.next = _zeros("I", cap)
        arrays = (self.state, self.attempts, self.missed, self.rtt, self.their, self.heard,
                  self.due, self.pinged, self.bucket, self.claimed, self.prev, self.next)
        for a, size in zip(arrays, (2, 1, 1, 2, 8, 4, 4, 4, 4, 1, 4, 4)):
            if (<array.array>a).ob_descr.itemsize != size:
                raise RuntimeError("unexpected array item size")
        self._pins = [memoryview(a) for a in arrays]  # an exporting array cannot be resized
        self._st = self.state.data.as_ushorts
        self._att = <uint8_t*>self.attempts.data.as_uchars
        self._mis = <uint8_t*>self.missed.data.as_uchars
        self._rtt = self.rtt.data.as_ushorts
        self._thr = <uint64_t*>self.their.data.as_ulonglongs
        self._hrd = self.heard.data.as_uints
        self._due = self.due.data.as_uints
        self._png = self.pinged.data.as_uints
        self._bkt = self.bucket.data.as_uints
        self._clm = <uint8_t*>self.claimed.data.as_uchars
        self._prv = self.prev.data.as_uints
        self._nxt = self.next.data.as_uints
        self._head = NIL_
        self._tail = NIL_
        self._heap = []
        self.direct = set()
        self._odd = {}
        self._odd_at = {}
        view = AddressView.__new__(AddressView)
        (<AddressView>view).t = self
        self.addresses = view

    def __dealloc__(self):
        PyMem_RawFree(self._index)
        PyMem_RawFree(self._addr)

    # ---- addresses and the index ------------------------------------------------------------

    cdef int _pack(self, object address, uint8_t* key) except -1:
        """0: address packed into key (18 bytes); 1: it does not pack (kept in _odd)."""
        cdef Py_ssize_t n
        cdef const char* text
        cdef char buf[TEXT]
        cdef char out[TEXT]
        cdef long p
        if not PyTuple_Check(address) or PyTuple_GET_SIZE(address) != 2:
            return 1
        host = address[0]
        port = address[1]
        if not PyUnicode_Check(host):
            return 1
        if PyLong_Check(port):
            if not 0 <= port <= 0xFFFF:
                return 1
            p = port
        elif isinstance(port, float) and 0 <= port <= 0xFFFF and port == int(port):
            p = int(port)  # (h, 80.0) == (h, 80) as a dict key
        else:
            return 1
        try:
            text = PyUnicode_AsUTF8AndSize(host, &n)
        except UnicodeError:
            return 1
        if n < 2 or n >= TEXT:
            return 1
        if parse4(text, n, key + 12):  # (exactly the texts inet_ntop makes)
            memset(key, 0, 10)
            key[10] = 0xFF
            key[11] = 0xFF
        else:
            memcpy(buf, text, n)
            buf[n] = 0
            if (inet_pton(AF_INET6, buf, key) != 1 or mapped(key)
                    or inet_ntop(AF_INET6, key, out, TEXT) == NULL):
                return 1  # (an IPv4 text that is not canonical fails here too)
            if <Py_ssize_t>strlen(out) != n or memcmp(out, buf, n) != 0:
                return 1  # not the canonical text: kept as given
        key[16] = p & 0xFF
        key[17] = p >> 8
        return 0

    cdef object _address(self, uint32_t slot):
        cdef const uint8_t* a = self._addr + <size_t>slot * ADDR
        cdef char out[TEXT]
        if self._odd_at:
            address = self._odd_at.get(slot)
            if address is not None:
                return address
        cdef Py_ssize_t n
        if mapped(a):
            n = format4(a + 12, out)
        else:
            inet_ntop(AF_INET6, a, out, TEXT)
            n = strlen(out)
        host = PyUnicode_New(n, 127)  # ASCII: one byte a character, no decoding
        memcpy(PyUnicode_1BYTE_DATA(host), out, n)
        return (host, a[16] | (a[17] << 8))

    cdef uint32_t _home(self, const uint8_t* key) noexcept nogil:
        cdef uint64_t w0, w1, h
        memcpy(&w0, key, 8)
        memcpy(&w1, key + 8, 8)
        h = mix64(w0 ^ self._hseed)
        h = mix64(h ^ w1)
        h = mix64(h ^ (<uint64_t>key[16] | (<uint64_t>key[17] << 8)))
        return <uint32_t>(((h >> 32) * self._isize) >> 32)

    cdef uint32_t _find(self, const uint8_t* key) noexcept nogil:
        """The bucket holding key's slot, or NIL."""
        cdef uint32_t pos = self._home(key)
        cdef uint32_t s
        while True:
            s = self._index[pos]
            if s == NIL_:
                return NIL_
            if memcmp(self._addr + <size_t>s * ADDR, key, ADDR) == 0:
                return pos
            pos += 1
            if pos == self._isize:
                pos = 0

    cdef void _index_drop(self, uint32_t slot) noexcept nogil:
        """Delete slot's bucket; shift the cluster behind it back (no tombstones)."""
        cdef uint32_t i = self._home(self._addr + <size_t>slot * ADDR)
        cdef uint32_t j, k, s
        cdef uint32_t* idx = self._index
        cdef uint32_t size = self._isize
        while idx[i] != slot:
            i += 1
            if i == size:
                i = 0
        j = i
        while True:
            j += 1
            if j == size:
                j = 0
            s = idx[j]
            if s == NIL_:
                break
            k = self._home(self._addr + <size_t>s * ADDR)
            # it stays unless its home lies cyclically outside (i, j]
            if (i < k <= j) if i <= j else (i < k or k <= j):
                continue
            idx[i] = s
            i = j
        idx[i] = NIL_

    cdef void _index_retarget(self, uint32_t src, uint32_t dst) noexcept nogil:
        cdef uint32_t pos = self._home(self._addr + <size_t>src * ADDR)
        while self._index[pos] != src:
            pos += 1
            if pos == self._isize:
                pos = 0
        self._index[pos] = dst

    def lookup(self, address):
        """The slot holding address, or -1."""
        cdef uint8_t key[ADDR]
        cdef uint32_t pos
        if self._pack(address, key):
            return self._odd.get(address, -1)
        pos = self._find(key)
        return -1 if pos == NIL_ else <long>self._index[pos]

    def __len__(self):
        return self.count

    def __contains__(self, address):
        cdef uint8_t key[ADDR]
        if self._pack(address, key):
            return address in self._odd
        return self._find(key) != NIL_

    def add(self, address, now_ms):
        """A new zeroed record for address (not yet present), heard at now_ms, at the LRU's tail.
        The caller evicts first when the table is full (Full otherwise)."""
        cdef uint8_t key[ADDR]
        cdef bint odd = self._pack(address, key)
        if (address in self._odd) if odd else (self._find(key) != NIL_):
            raise KeyError(f"{address} is already in the table")
        if self.count >= self.capacity:
            raise Full("the connection table is full")
        cdef uint32_t now = now_ms
        cdef uint32_t slot = self.count
        cdef uint32_t pos
        if odd:
            memset(self._addr + <size_t>slot * ADDR, 0, ADDR)
            self._odd[address] = slot
            self._odd_at[slot] = address
        else:
            memcpy(self._addr + <size_t>slot * ADDR, key, ADDR)
            pos = self._home(key)
            while self._index[pos] != NIL_:
                pos += 1
                if pos == self._isize:
                    pos = 0
            self._index[pos] = slot
        self.count += 1
        self._st[slot] = 0
        self._att[slot] = 0
        self._mis[slot] = 0
        self._rtt[slot] = 0
        self._thr[slot] = 0
        self._hrd[slot] = now
        self._due[slot] = 0
        self._png[slot] = 0
        self._bkt[slot] = 0
        self._clm[slot] = 0
        self._prv[slot] = 0
        self._nxt[slot] = 0
        self._link_tail(slot)
        return slot

    def remove(self, Py_ssize_t slot):
        """Free a slot; the last record moves into it. Returns the slot that moved (now at
        `slot`), or -1 when slot was the last."""
        if not 0 <= slot < self.count:
            raise IndexError(f"slot {slot} is not in use")
        cdef uint32_t s = <uint32_t>slot
        if not self._st[s] & S_DIRECT_:
            self._unlink(s)
        self.direct.discard(slot)
        if self._odd_at and s in self._odd_at:
            del self._odd[self._odd_at.pop(s)]
        else:
            self._index_drop(s)
        cdef uint32_t last = self.count - 1
        self.count = last
        if s == last:
            return -1
        self._move(last, s)
        return last

    cdef int _move(self, uint32_t src, uint32_t dst) except -1:
        cdef uint32_t p, n
        if self._odd_at and src in self._odd_at:
            address = self._odd_at.pop(src)
            self._odd_at[dst] = address
            self._odd[address] = dst
        else:
            self._index_retarget(src, dst)
        memcpy(self._addr + <size_t>dst * ADDR, self._addr + <size_t>src * ADDR, ADDR)
        self._st[dst] = self._st[src]
        self._att[dst] = self._att[src]
        self._mis[dst] = self._mis[src]
        self._rtt[dst] = self._rtt[src]
        self._thr[dst] = self._thr[src]
        self._hrd[dst] = self._hrd[src]
        self._due[dst] = self._due[src]
        self._png[dst] = self._png[src]
        self._bkt[dst] = self._bkt[src]
        self._clm[dst] = self._clm[src]
        self._prv[dst] = self._prv[src]
        self._nxt[dst] = self._nxt[src]
        if self._st[dst] & S_DIRECT_:
            self.direct.discard(src)
            self.direct.add(dst)
        else:  # fix the neighbours' links
            p = self._prv[dst]
            n = self._nxt[dst]
            if p == NIL_:
                self._head = dst
            elif p < self.capacity:
                self._nxt[p] = dst
            if n == NIL_:
                self._tail = dst
            elif n < self.capacity:
                self._prv[n] = dst
        if self._due[dst]:
            heapq_push(self._heap, (self._due[dst], dst))
        return 0

    cdef int _slot_ok(self, Py_ssize_t slot) except -1:
        if not 0 <= slot < self.capacity:
            raise IndexError("array index out of range")
        return 0

    # ---- the LRU list (non-direct records, by last heard) ------------------------------------

    cdef int _link_tail(self, uint32_t slot) except -1:
        self._prv[slot] = self._tail
        self._nxt[slot] = NIL_
        if self._tail == NIL_:
            self._head = slot
        else:
            self._nxt[self._tail] = slot
        self._tail = slot
        return 0

    cdef int _link_head(self, uint32_t slot) except -1:
        self._nxt[slot] = self._head
        self._prv[slot] = NIL_
        if self._head == NIL_:
            self._tail = slot
        else:
            self._prv[self._head] = slot
        self._head = slot
        return 0

    cdef int _unlink(self, uint32_t slot) except -1:
        cdef uint32_t p = self._prv[slot]
        cdef uint32_t n = self._nxt[slot]
        # (links written from Python may point anywhere: as the arrays do, refuse those)
        if p != NIL_ and p >= self.capacity or n != NIL_ and n >= self.capacity:
            raise IndexError("array index out of range")
        if p == NIL_:
            self._head = n
        else:
            self._nxt[p] = n
        if n == NIL_:
            self._tail = p
        else:
            self._prv[n] = p
        self._prv[slot] = NIL_
        self._nxt[slot] = NIL_
        return 0

    def touch(self, Py_ssize_t slot, now_ms):
        """Heard from at now_ms: to the LRU's tail (direct records are in no list)."""
        self._slot_ok(slot)
        cdef uint32_t s = <uint32_t>slot
        self._hrd[s] = now_ms
        if not self._st[s] & S_DIRECT_ and self._tail != s:
            self._unlink(s)
            self._link_tail(s)

    def evictable(self):
        """The non-direct record heard from least recently (what a full table evicts), or -1."""
        return -1 if self._head == NIL_ else <long>self._head

    def lru(self):
        """The evictable records, least recently heard first (for tests and inspection)."""
        cdef uint32_t s = self._head
        while s != NIL_:
            if s >= self.capacity:
                raise IndexError("array index out of range")
            yield s
            s = self._nxt[s]

    def set_direct(self, Py_ssize_t slot, bint direct):
        """Make a record direct (out of the LRU list, never evicted) or vague again (at the
        LRU's head: a demoted peer, silent for three Pings, is the first to go)."""
        self._slot_ok(slot)
        cdef uint32_t s = <uint32_t>slot
        cdef uint16_t st = self._st[s]
        if direct and not st & S_DIRECT_:
            self._unlink(s)
            self._st[s] = st | S_DIRECT_
            self.direct.add(slot)
        elif not direct and st & S_DIRECT_:
            self._st[s] = st & ~S_DIRECT_
            self.direct.discard(slot)
            self._link_head(s)

    # ---- attempts ----------------------------------------------------------------------------

    def ours(self, Py_ssize_t slot):
        self._slot_ok(slot)
        return self._att[slot] >> 4

    def seen(self, Py_ssize_t slot):
        self._slot_ok(slot)
        return self._att[slot] & 0xF

    def set_attempts(self, Py_ssize_t slot, ours, seen):
        self._slot_ok(slot)
        cdef int o = ours & 0xF
        cdef int n = seen & 0xF
        self._att[slot] = <uint8_t>((o << 4) | n)

    # ---- the due heap ------------------------------------------------------------------------

    def set_due(self, Py_ssize_t slot, when_ms):
        """Arm the record's timer at when_ms (0 disarms it)."""
        when_ms = int(when_ms)
        self._slot_ok(slot)
        cdef uint32_t when = when_ms
        self._due[slot] = when
        if when:
            heapq_push(self._heap, (when_ms, slot))
            if len(self._heap) > 4 * <Py_ssize_t>self.count + 64:
                self._rebuild_heap()

    cdef void _rebuild_heap(self):
        """Drop stale entries: amortised O(1) per set_due."""
        cdef uint32_t s
        heap = []
        for s in range(self.count):
            if self._due[s]:
                heap.append((self._due[s], s))
        heapq_heapify(heap)
        self._heap = heap

    def next_due(self):
        """The earliest armed timer (ms), or None."""
        cdef list heap = self._heap
        cdef tuple top
        cdef uint32_t slot
        while heap:
            top = <tuple>heap[0]
            slot = top[1]
            if slot < self.count and self._due[slot] == <uint32_t>top[0]:
                return top[0]
            heapq_pop(heap)
        return None

    def pop_due(self, now_ms):
        """Slots whose timer is due at now_ms, each disarmed (the caller re-arms)."""
        cdef list out = []
        cdef list heap = self._heap
        cdef tuple top
        cdef uint32_t slot
        while heap and (<tuple>heap[0])[0] <= now_ms:
            top = <tuple>heapq_pop(heap)
            slot = top[1]
            if slot < self.count and self._due[slot] == <uint32_t>top[0]:
                self._due[slot] = 0
                out.append(slot)
        return out

    # ---- round robin -------------------------------------------------------------------------

    def scan(self, Py_ssize_t cursor, Py_ssize_t want, Py_ssize_t probe, long long mask,
             long long match):
        """Up to `want` slots whose state & mask == match, looking at no more than `probe`
        slots from `cursor` on (wrapping); returns them and the cursor to pass next time."""
        cdef list out = []
        cdef Py_ssize_t n = self.count
        cdef Py_ssize_t s, r, i, k, got = 0
        if n == 0:
            return out, 0
        s = cursor if cursor < n else 0
        k = probe if probe < n else n
        for i in range(k):
            r = s
            if r < 0:  # (as the pure table's array indexing does)
                r += self.capacity
                if r < 0:
                    raise IndexError("array index out of range")
            if (self._st[r] & mask) == match:
                out.append(s)
                got += 1
                if got >= want:
                    s = s + 1 if s + 1 < n else 0
                    break
            s = s + 1 if s + 1 < n else 0
        return out, s

    # ---- time --------------------------------------------------------------------------------

    def rebase(self, long long shift_ms):
        """Move the time base shift_ms later: every time field less shift_ms, at least 0 (a
        non-zero `due` at least 1, so it stays armed). O(table), every 2**30 ms."""
        cdef uint32_t* fields[4]
        cdef uint32_t s
        cdef int f
        cdef long long v
        fields[0] = self._hrd
        fields[1] = self._due
        fields[2] = self._png
        fields[3] = self._bkt
        for f in range(4):
            for s in range(self.count):
                v = fields[f][s]
                if v:
                    v -= shift_ms
                    if v < (1 if f == 1 else 0):
                        v = 1 if f == 1 else 0
                    if v > 0xFFFFFFFF:
                        raise OverflowError("unsigned int is greater than maximum")
                    fields[f][s] = <uint32_t>v
        self._rebuild_heap()

    def memory(self):
        """Bytes the twin's records take at this capacity."""
        return RECORD_BYTES * self.capacity

    def index_bytes(self):
        """Bytes of the (host, port) index (4 a bucket)."""
        return 4 * <Py_ssize_t>self._isize
