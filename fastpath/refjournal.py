"""The pure-Python twin of fastpath.journal: the same Journal and GapTracker, the same semantics.

The reference for journal.pyx (as refcodec.py is for codec.pyx); PELOTARI_PURE_PYTHON=1 selects it
(fastpath/implementation.py). Client rules of the seed are cited as (C1)..(C6).
"""
from fastpath.refcodec import encode_deliver

__all__ = ["MESSAGE", "LOST", "RESET", "ACCEPTED", "DUPLICATE", "RESYNCED", "Journal", "Gap",
           "GapTracker"]

SEQ_MASK = (1 << 48) - 1
HALF_RANGE = 1 << 47
U64 = 1 << 64

# Kinds of item GapTracker.ready() returns, always in sequence order.
MESSAGE = 0   # (MESSAGE, sequence, data)
LOST = 1      # (LOST, first_sequence, last_sequence): repair gave up; never silently skipped
RESET = 2     # (RESET, expected_sequence, received_sequence): the sequence jumped (restart)

# What GapTracker.offer() says about one DELIVER.
ACCEPTED = 0
DUPLICATE = 1
RESYNCED = 2


def _u64(value):
    """A uint64_t argument as Cython takes it: an int in 0..2**64-1, else OverflowError."""
    value = value.__index__()
    if not 0 <= value < U64:
        raise OverflowError(f"{value} is not a uint64_t")
    return value


class Journal:
    """Ring buffer of the most recent DELIVERs, indexed by SEQUENCE (C4)."""

    __slots__ = ("capacity", "count", "seqs", "items")

    def __init__(self, capacity=4096):
        if capacity < 1:
            raise ValueError("journal capacity must be at least 1")
        self.capacity = capacity
        self.count = 0
        self.seqs = [0] * capacity  # seq + 1 per slot; 0 = empty
        self.items = [None] * capacity

    def __len__(self):
        return self.count

    def store(self, seq, data):
        """Keep data as the message with this SEQUENCE, evicting whatever shared its slot."""
        i = _u64(seq) % self.capacity
        if self.seqs[i] == 0:
            self.count += 1
        self.seqs[i] = (seq + 1) % U64
        self.items[i] = data

    def get(self, seq):
        """Return the stored data for SEQUENCE, or None."""
        i = _u64(seq) % self.capacity
        if self.seqs[i] == (seq + 1) % U64:
            return self.items[i]
        return None

    def serve(self, from_seq, to_seq, limit=1024):
        """DELIVER datagrams for the stored part of FROM_SEQ..TO_SEQ (at most limit of them)."""
        span = (_u64(to_seq) - _u64(from_seq)) & SEQ_MASK
        out = []
        for k in range(min(span + 1, limit % U64)):  # a negative limit is huge, as in C
            seq = (from_seq + k) & SEQ_MASK
            data = self.get(seq)
            if data is not None:
                out.append(encode_deliver(seq, data))
        return out


class Gap:
    """A run of missing positions and its repair state."""

    __slots__ = ("first", "last", "next_try", "attempts", "lost")

    def __init__(self, first, last, next_try):
        self.first = first
        self.last = last
        self.next_try = float(next_try)
        self.attempts = 0
        self.lost = False

    def __repr__(self):
        return f"Gap({self.first}..{self.last}, attempts={self.attempts}, lost={self.lost})"


class GapTracker:
    """Orders DELIVERs by SEQUENCE, drops duplicates (C3), and schedules REQUESTs for gaps (C2).

    Sequences are 48-bit and wrap; internally they are unwrapped to unbounded positions.
    A jump of more than max_gap ahead, or more than max_gap behind, is a resync (the backbone
    restarted, or this client was cut off for too long to repair): open gaps are reported
    lost, held messages released, and tracking restarts at the new sequence.
    """

    __slots__ = ("started", "next_pos", "highest", "held", "gaps", "out", "max_gap", "max_held",
                 "max_held_bytes", "held_bytes", "max_request_range", "request_delay", "backoff", "retries", "duplicates",
                 "resets", "lost_messages")

    def __init__(self, *, max_gap=65536, max_held=65536, max_held_bytes=16 << 20,
                 max_request_range=1024, request_delay=0.02, backoff=2.0, retries=4):
        if (max_gap < 1 or max_held < 1 or max_held_bytes < 1 or max_request_range < 1
                or retries < 0):
            raise ValueError("max_gap, max_held, max_held_bytes and max_request_range must be positive")
        self.max_gap = max_gap
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        self.held_bytes = 0  # DATA bytes of the messages waiting behind a gap
        self.max_request_range = max_request_range
        self.request_delay = float(request_delay)
        self.backoff = float(backoff)
        self.retries = retries
        self.started = False
        self.next_pos = 0   # next position to release (unwrapped 48-bit sequence)
        self.highest = 0    # highest position accepted
        self.held = {}      # position -> data, for positions in (next_pos, highest]
        self.gaps = []      # Gap, sorted, disjoint, all within [next_pos, highest]
        self.out = []       # released items, in order
        self.duplicates = 0
        self.resets = 0
        self.lost_messages = 0

    @property
    def next_sequence(self):
        """The SEQUENCE the application will see next (None before the first DELIVER)."""
        return (self.next_pos & SEQ_MASK) if self.started else None

    @property
    def highest_sequence(self):
        """The highest SEQUENCE accepted so far (None before the first DELIVER)."""
        return (self.highest & SEQ_MASK) if self.started else None

    @property
    def held_count(self):
        """Messages waiting behind a gap."""
        return len(self.held)

    def open_gaps(self):
        """[(first_sequence, last_sequence)] still being repaired."""
        return [(g.first & SEQ_MASK, g.last & SEQ_MASK) for g in self.gaps if not g.lost]

    def requested(self, seq):
        """Whether SEQUENCE lies in an open gap that a REQUEST has been sent for: the only
        sequences a DELIVER from anyone but the backbone may fill (never past the highest)."""
        if not self.started or not self.gaps:
            return False
        pos = self._unwrap(_u64(seq))
        lo, hi = 0, len(self.gaps)
        while lo < hi:  # gaps are sorted and disjoint: the last one starting at or before pos
            mid = (lo + hi) // 2
            if self.gaps[mid].first <= pos:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return False
        g = self.gaps[lo - 1]
        return g.first <= pos <= g.last and not g.lost and g.attempts > 0

    def _unwrap(self, seq):
        delta = (seq - self.next_pos) & SEQ_MASK
        if delta >= HALF_RANGE:
            delta -= 1 << 48
        return self.next_pos + delta

    def offer(self, seq, data, now):
        """Take one DELIVER; return ACCEPTED, DUPLICATE or RESYNCED."""
        seq = _u64(seq)
        status = ACCEPTED
        if not self.started:
            self.started = True
            self.next_pos = seq
            self.highest = self.next_pos - 1
        pos = self._unwrap(seq)
        if pos < self.next_pos - self.max_gap or pos > self.highest + self.max_gap:
            self._resync(seq, pos)
            pos = self.next_pos
            status = RESYNCED
        elif pos < self.next_pos or pos in self.held:
            self.duplicates += 1
            return DUPLICATE
        if pos > self.highest:
            if pos > self.highest + 1:
                self.gaps.append(Gap(self.highest + 1, pos - 1, now + self.request_delay))
            self.highest = pos
        else:
            self._fill(pos)
        self.held[pos] = data
        self.held_bytes += len(data)
        self._release()
        # Over either bound, give up gaps oldest first: each releases what it held back.
        while (len(self.held) > self.max_held or self.held_bytes > self.max_held_bytes) \
                and self._lose_first():
            self._release()
        return status

    def _resync(self, seq, pos):
        # Every position in [next_pos, highest] is held or inside a gap, so once all gaps are
        # lost one _release() empties both.
        for g in self.gaps:
            g.lost = True
        self._release()
        self.resets += 1
        self.out.append((RESET, self.next_pos & SEQ_MASK, seq))
        self.next_pos = pos
        self.highest = pos - 1

    def _fill(self, pos):
        for k, g in enumerate(self.gaps):
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
        self._lose_first()

    def give_up(self, first, last):
        """Give up every gap lying within SEQUENCEs first..last (no one will supply them: a
        failover's); what they held back is released. Returns how many."""
        if not self.started:
            return 0
        lo = self._unwrap(first)
        hi = lo + ((last - first) & SEQ_MASK)
        n = 0
        for g in self.gaps:
            if not g.lost and g.first >= lo and g.last <= hi:
                g.lost = True
                n += 1
        if n:
            self._release()
        return n

    def _lose_first(self):
        for g in self.gaps:
            if not g.lost:
                g.lost = True
                return True
        return False

    def _release(self):
        while True:
            data = self.held.pop(self.next_pos, None)
            if data is not None:
                self.held_bytes -= len(data)
                self.out.append((MESSAGE, self.next_pos & SEQ_MASK, data))
                self.next_pos += 1
                continue
            if self.gaps:
                g = self.gaps[0]
                if g.first == self.next_pos and g.lost:
                    self.out.append((LOST, g.first & SEQ_MASK, g.last & SEQ_MASK))
                    self.lost_messages += g.last - g.first + 1
                    self.next_pos = g.last + 1
                    del self.gaps[0]
                    continue
            return

    def ready(self):
        """Items released since the last call: MESSAGE, LOST and RESET tuples, in order."""
        out = self.out
        self.out = []
        return out

    def due(self, now):
        """Ranges to REQUEST now, each at most max_request_range long; gives up on exhausted gaps."""
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
                requests.append((lo & SEQ_MASK, hi & SEQ_MASK))
                lo = hi + 1
            g.attempts += 1
            # The first REQUEST goes out after request_delay; each retry waits backoff times longer.
            g.next_try = now + self.request_delay * (self.backoff ** g.attempts)
        if gave_up:
            self._release()
        return requests

    def next_deadline(self):
        """Earliest time due() has work, or None."""
        best = None
        for g in self.gaps:
            if not g.lost and (best is None or g.next_try < best):
                best = g.next_try
        return best
