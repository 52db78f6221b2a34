# cython: language_level=3
"""Client side of fyrehose: the journal that serves FORWARDs, and gap tracking with repair.

Client rules of the seed are cited as (C1)..(C6).
"""
cimport cython
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint64_t, int64_t

from fastpath.codec import encode_deliver

cdef uint64_t SEQ_MASK = (<uint64_t>1 << 48) - 1
cdef int64_t HALF_RANGE = <int64_t>1 << 47

# Kinds of item GapTracker.ready() returns, always in sequence order.
MESSAGE = 0   # (MESSAGE, sequence, data)
LOST = 1      # (LOST, first_sequence, last_sequence): repair gave up; never silently skipped
RESET = 2     # (RESET, expected_sequence, received_sequence): the sequence jumped (restart)

# What GapTracker.offer() says about one DELIVER.
ACCEPTED = 0
DUPLICATE = 1
RESYNCED = 2


@cython.final
cdef class Journal:
    """Ring buffer of the most recent DELIVERs, indexed by SEQUENCE (C4)."""

    def __cinit__(self, Py_ssize_t capacity=4096):
        if capacity < 1:
            raise ValueError("journal capacity must be at least 1")
        self.capacity = capacity
        self.seqs = <uint64_t*>PyMem_Calloc(capacity, sizeof(uint64_t))
        if not self.seqs:
            raise MemoryError()
        self.items = [None] * capacity

    def __dealloc__(self):
        PyMem_Free(self.seqs)

    def __len__(self):
        return self.count

    cpdef store(self, uint64_t seq, data):
        """Keep data as the message with this SEQUENCE, evicting whatever shared its slot."""
        cdef Py_ssize_t i = seq % self.capacity
        if self.seqs[i] == 0:
            self.count += 1
        self.seqs[i] = seq + 1
        self.items[i] = data

    cpdef object get(self, uint64_t seq):
        """Return the stored data for SEQUENCE, or None."""
        cdef Py_ssize_t i = seq % self.capacity
        if self.seqs[i] == seq + 1:
            return self.items[i]
        return None

    def serve(self, uint64_t from_seq, uint64_t to_seq, Py_ssize_t limit=1024):
        """DELIVER datagrams for the stored part of FROM_SEQ..TO_SEQ (at most limit of them)."""
        out = []
        cdef uint64_t seq = from_seq
        cdef uint64_t span = (to_seq - from_seq) & SEQ_MASK
        cdef uint64_t k
        for k in range(min(span + 1, <uint64_t>limit)):
            seq = (from_seq + k) & SEQ_MASK
            data = self.get(seq)
            if data is not None:
                out.append(encode_deliver(seq, data))
        return out


@cython.final
cdef class Gap:
    """A run of missing positions and its repair state."""

    def __cinit__(self, int64_t first, int64_t last, double next_try):
        self.first = first
        self.last = last
        self.next_try = next_try

    def __repr__(self):
        return f"Gap({self.first}..{self.last}, attempts={self.attempts}, lost={self.lost})"


@cython.final
cdef class GapTracker:
    """Orders DELIVERs by SEQUENCE, drops duplicates (C3), and schedules REQUESTs for gaps (C2).

    Sequences are 48-bit and wrap; internally they are unwrapped to 64-bit positions.
    A jump of more than max_gap ahead, or more than max_gap behind, is a resync (the backbone
    restarted, or this client was cut off for too long to repair): open gaps are reported
    lost, held messages released, and tracking restarts at the new sequence.
    """

    def __cinit__(self, *, int64_t max_gap=65536, Py_ssize_t max_held=65536,
                  Py_ssize_t max_held_bytes=16 << 20,
                  int64_t max_request_range=1024, double request_delay=0.02,
                  double backoff=2.0, int retries=4):
        if (max_gap < 1 or max_held < 1 or max_held_bytes < 1 or max_request_range < 1
                or retries < 0):
            raise ValueError("max_gap, max_held, max_held_bytes and max_request_range must be positive")
        self.max_gap = max_gap
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        self.max_request_range = max_request_range
        self.request_delay = request_delay
        self.backoff = backoff
        self.retries = retries
        self.held = {}
        self.gaps = []
        self.out = []

    @property
    def next_sequence(self):
        """The SEQUENCE the application will see next (None before the first DELIVER)."""
        return (<uint64_t>self.next_pos & SEQ_MASK) if self.started else None

    @property
    def highest_sequence(self):
        """The highest SEQUENCE accepted so far (None before the first DELIVER)."""
        return (<uint64_t>self.highest & SEQ_MASK) if self.started else None

    @property
    def held_count(self):
        """Messages waiting behind a gap."""
        return len(self.held)

    @property
    def held_bytes(self):
        """DATA bytes of the messages waiting behind a gap."""
        return self.held_size

    def open_gaps(self):
        """[(first_sequence, last_sequence)] still being repaired."""
        # Positions may be negative (a resync below sequence 0): the casts must be C casts.
        return [(<uint64_t>(<Gap>g).first & SEQ_MASK, <uint64_t>(<Gap>g).last & SEQ_MASK)
                for g in self.gaps if not (<Gap>g).lost]

    def requested(self, uint64_t seq):
        """Whether SEQUENCE lies in an open gap that a REQUEST has been sent for: the only
        sequences a DELIVER from anyone but the backbone may fill (never past the highest)."""
        cdef Gap g
        cdef int64_t pos
        cdef Py_ssize_t lo = 0, hi = len(self.gaps), mid
        if not self.started or not self.gaps:
            return False
        pos = self.unwrap(seq)
        while lo < hi:  # gaps are sorted and disjoint: the last one starting at or before pos
            mid = (lo + hi) // 2
            if (<Gap>self.gaps[mid]).first <= pos:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return False
        g = self.gaps[lo - 1]
        return g.first <= pos <= g.last and not g.lost and g.attempts > 0

    cdef int64_t unwrap(self, uint64_t seq):
        cdef int64_t delta = <int64_t>((seq - <uint64_t>self.next_pos) & SEQ_MASK)
        if delta >= HALF_RANGE:
            delta -= <int64_t>1 << 48
        return self.next_pos + delta

    def offer(self, uint64_t seq, data, double now):
        """Take one DELIVER; return ACCEPTED, DUPLICATE or RESYNCED."""
        cdef int64_t pos
        cdef int status = ACCEPTED
        if not self.started:
            self.started = True
            self.next_pos = seq
            self.highest = self.next_pos - 1
        pos = self.unwrap(seq)
        if pos < self.next_pos - self.max_gap or pos > self.highest + self.max_gap:
            self.resync(seq, pos)
            pos = self.next_pos
            status = RESYNCED
        elif pos < self.next_pos or pos in self.held:
            self.duplicates += 1
            return DUPLICATE
        if pos > self.highest:
            if pos > self.highest + 1:
                self.add_gap(self.highest + 1, pos - 1, now)
            self.highest = pos
        else:
            self.fill(pos)
        self.held[pos] = data
        self.held_size += len(data)
        self.release()
        # Over either bound, give up gaps oldest first: each releases what it held back.
        while (len(self.held) > self.max_held or self.held_size > self.max_held_bytes) \
                and self.lose_first():
            self.release()
        return status

    cdef void resync(self, uint64_t seq, int64_t pos):
        cdef Gap g
        # Every position in [next_pos, highest] is held or inside a gap, so once all gaps are
        # lost one release() empties both.
        for g in self.gaps:
            g.lost = True
        self.release()
        self.resets += 1
        self.out.append((RESET, <uint64_t>self.next_pos & SEQ_MASK, seq))
        self.next_pos = pos
        self.highest = pos - 1

    cdef void add_gap(self, int64_t first, int64_t last, double now):
        self.gaps.append(Gap(first, last, now + self.request_delay))

    cdef void fill(self, int64_t pos):
        cdef Py_ssize_t k
        cdef Gap g, tail
        for k in range(len(self.gaps)):
            g = self.gaps[k]
            if g.first <= pos <= g.last:
                if g.first == g.last:
                    del self.gaps[k]
                elif pos == g.first:
                    g.first += 1
                elif pos == g.last:
                    g.last -= 1
                else:
                    tail = Gap(pos + 1, g.last, g.next_try)
                    tail.attempts = g.attempts
                    tail.lost = g.lost
                    g.last = pos - 1
                    self.gaps.insert(k + 1, tail)
                return

    def lose_first_gap(self):
        """Give up the oldest gap still being repaired."""
        self.lose_first()

    def give_up(self, uint64_t first, uint64_t last):
        """Give up every gap lying within SEQUENCEs first..last (no one will supply them: a
        failover's); what they held back is released. Returns how many."""
        cdef Gap g
        cdef int64_t lo, hi
        cdef int n = 0
        if not self.started:
            return 0
        lo = self.unwrap(first)
        hi = lo + <int64_t>((last - first) & SEQ_MASK)
        for g in self.gaps:
            if not g.lost and g.first >= lo and g.last <= hi:
                g.lost = True
                n += 1
        if n:
            self.release()
        return n

    cdef bint lose_first(self):
        cdef Gap g
        for g in self.gaps:
            if not g.lost:
                g.lost = True
                return True
        return False

    cdef void release(self):
        cdef Gap g
        while True:
            data = self.held.pop(self.next_pos, None)
            if data is not None:
                self.held_size -= len(data)
                self.out.append((MESSAGE, <uint64_t>self.next_pos & SEQ_MASK, data))
                self.next_pos += 1
                continue
            if self.gaps:
                g = self.gaps[0]
                if g.first == self.next_pos and g.lost:
                    self.out.append((LOST, <uint64_t>g.first & SEQ_MASK, <uint64_t>g.last & SEQ_MASK))
                    self.lost_messages += <uint64_t>(g.last - g.first + 1)
                    self.next_pos = g.last + 1
                    del self.gaps[0]
                    continue
            return

    def ready(self):
        """Items released since the last call: MESSAGE, LOST and RESET tuples, in order."""
        out = self.out
        self.out = []
        return out

    def due(self, double now):
        """Ranges to REQUEST now, each at most max_request_range long; gives up on exhausted gaps."""
        cdef Gap g
        cdef int64_t lo, hi
        requests = []
        gave_up = False
        for g in self.gaps:
            if g.lost or g.next_try > now:
                continue
            if g.attempts > self.retries:
                g.lost = True
                gave_up = True
                continue
            lo = g.first
            while lo <= g.last:
                hi = min(g.last, lo + self.max_request_range - 1)
                requests.append((<uint64_t>lo & SEQ_MASK, <uint64_t>hi & SEQ_MASK))
                lo = hi + 1
            g.attempts += 1
            # The first REQUEST goes out after request_delay; each retry waits backoff times longer.
            g.next_try = now + self.request_delay * (self.backoff ** g.attempts)
        if gave_up:
            self.release()
        return requests

    def next_deadline(self):
        """Earliest time due() has work, or None."""
        cdef Gap g
        best = None
        for g in self.gaps:
            if not g.lost and (best is None or g.next_try < best):
                best = g.next_try
        return best
