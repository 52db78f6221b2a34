"""The swarm connection table: fixed-width records addressed by slot number, an index on
(host, port), a capacity with eviction, and the iterations the timers need — each O(work), never
O(table) per tick.

Pure Python (`PyConnectionTable`), laid out as its Cython twin (fastpath/swarmtable.pyx,
selected at the end of this module unless PELOTARI_PURE_PYTHON=1) is: one array per field (the
`array` module, fixed widths), no Python object per connection except the address tuple and its
index entry (which the twin replaces by 18 packed bytes and an open-addressing index). A record,
57 bytes in the twin — with the twin's index (4 bytes a slot, at most 3/4 full: 5.3 bytes a
connection at capacity) under the 64 bytes a connection the issue allows:

    offset  bytes  field      meaning
         0     16  addr       IPv6, or IPv4 as ::ffff:a.b.c.d          (here: `addresses[slot]`)
        16      2  port       u16                                     (here: in the tuple)
        18      2  state      u16 bits, the S_* constants below
        20      1  attempts   u8: our Attempt (high nibble) | highest Attempt seen (low nibble)
        21      1  missed     u8: unanswered Connect sends / Pings / checks in a row
        22      2  rtt        u16 ms, saturating at 65,535 (the last Pong's round trip)
        24      8  their      u64: the peer's Connect token (what our Ack echoes)
        32      4  heard      u32 ms: last heard from (any datagram that passed the MAC)
        36      4  due        u32 ms: this record's timer (0 = none): Connect resend, give-up,
                              half-open expiry, next direct Ping
        40      4  pinged     u32 ms: send time of our last Ping (its token's time); its Pong
                              counted: S_PONGED
        44      4  bucket     u32 ms: vague: GCRA time of the own Ping limit; direct: the time
                              of the next GetConnections (a direct peer's Pings are not limited)
        48      1  claimed    u8: the slot in which it last claimed the global limit, as slot
                              number mod 255 + 1 (0: never; a claim 255 slots old aliases)
        49      4  prev       u32: the LRU list of evictable (non-direct) records, by last heard
        53      4  next       u32
                   --
                   57

Times are u32 milliseconds since the table's base (`ms()` below); `rebase(shift)` moves the base
forward (the core calls it when a time would pass 2**31 ms, i.e. every 12 days: one O(table)
pass, every time field clamped at 0).

Slots are dense: slots 0..count-1 are in use and removing one moves the last record into the
hole (`remove` says which slot moved), so the round-robin cursors walk only live records.
"""
from array import array
from heapq import heapify as heapq_heapify
from heapq import heappop as heapq_pop
from heapq import heappush as heapq_push
from typing import Dict, Iterable, List, Optional, Tuple

from fastpath.implementation import compiled

Address = Tuple[str, int]

NIL = 0xFFFFFFFF  # no slot (list ends)
MS_MASK = 0xFFFFFFFF

# state bits (u16)
S_DIRECT = 0x0001  # our choice: pinged every ping interval, never evicted
S_OUTBOUND = 0x0002  # we dialled: we resend our Connect; established -> direct (if room)
S_WANTED = 0x0004  # the application asked for it (connect()): redialled after a give-up
S_SENT = 0x0008  # Connect Sent (the seed's flag): our Connect for `ours` went out
S_RECEIVED = 0x0010  # Connect Received (the seed's flag): we hold the peer's Connect (`their`)
S_ACKED = 0x0020  # the peer echoed our token: it holds our Connect
S_ACK_SENT = 0x0040  # we sent a Connect with Ack echoing `their`
S_SEEN = 0x0080  # the low nibble of `attempts` (highest seen) is valid
S_PROMOTING = 0x0100  # a promotion Ping is out: a fast Pong makes it direct
S_ASKED = 0x0200  # our GetConnections is out: one Connections answer is taken
S_PONGED = 0x0400  # the Pong of our last Ping (sent at `pinged`) was counted
S_RTT = 0x0800  # `rtt` holds a measured round trip
S_ESTABLISHED = S_RECEIVED | S_ACKED  # both hold each other's Connect

# Widths (array type codes): the record above, field by field.
FIELDS = {
    "state": "H", "attempts": "B", "missed": "B", "rtt": "H", "their": "Q", "heard": "I",
    "due": "I", "pinged": "I", "bucket": "I", "claimed": "B", "prev": "I",
    "next": "I",
}
TIME_FIELDS = ("heard", "due", "pinged", "bucket")
RECORD_BYTES = 16 + 2 + sum(array(code).itemsize for code in FIELDS.values())
assert RECORD_BYTES == 57, RECORD_BYTES


class Full(Exception):
    """The table is full and holds nothing it may evict (every record is direct)."""


class PyConnectionTable:
    """Fixed-width connection records by slot, an index on (host, port), LRU eviction of
    non-direct records, a due-time heap and round-robin cursors."""

    def __init__(self, capacity: int):
        if not 1 <= capacity < NIL:
            raise ValueError("capacity must be within 1..2**32-2")
        self.capacity = capacity
        self.count = 0
        self.addresses: List[Optional[Address]] = [None] * capacity
        for name, code in FIELDS.items():
            setattr(self, name, array(code, bytes(array(code).itemsize * capacity)))
        self._index: Dict[Address, int] = {}
        self._head = NIL  # least recently heard evictable record
        self._tail = NIL
        self._heap: List[Tuple[int, int]] = []  # (due ms, slot), lazily invalidated
        self.direct: set = set()  # slots of direct records (at most a few dozen)

    # ---- index -------------------------------------------------------------------------------

    def lookup(self, address: Address) -> int:
        """The slot holding address, or -1."""
        return self._index.get(address, -1)

    def __len__(self) -> int:
        return self.count

    def __contains__(self, address) -> bool:
        return address in self._index

    def add(self, address: Address, now_ms: int) -> int:
        """A new zeroed record for address (not yet present), heard at now_ms, at the LRU's tail.
        The caller evicts first when the table is full (Full otherwise)."""
        if address in self._index:
            raise KeyError(f"{address} is already in the table")
        if self.count >= self.capacity:
            raise Full("the connection table is full")
        slot = self.count
        self.count += 1
        self.addresses[slot] = address
        self._index[address] = slot
        for name in FIELDS:
            getattr(self, name)[slot] = 0
        self.heard[slot] = now_ms
        self._link_tail(slot)
        return slot

    def remove(self, slot: int) -> int:
        """Free a slot; the last record moves into it. Returns the slot that moved (now at
        `slot`), or -1 when slot was the last."""
        self._check(slot)
        if not self.state[slot] & S_DIRECT:
            self._unlink(slot)
        self.direct.discard(slot)
        del self._index[self.addresses[slot]]
        last = self.count - 1
        self.count = last
        if slot == last:
            self.addresses[slot] = None
            return -1
        self._move(last, slot)
        return last

    def _move(self, src: int, dst: int) -> None:
        address = self.addresses[src]
        self.addresses[dst] = address
        self.addresses[src] = None
        self._index[address] = dst
        for name in FIELDS:
            arr = getattr(self, name)
            arr[dst] = arr[src]
        if self.state[dst] & S_DIRECT:
            self.direct.discard(src)
            self.direct.add(dst)
        else:  # fix the neighbours' links
            p, n = self.prev[dst], self.next[dst]
            if p == NIL:
                self._head = dst
            else:
                self.next[p] = dst
            if n == NIL:
                self._tail = dst
            else:
                self.prev[n] = dst
        if self.due[dst]:
            heapq_push(self._heap, (self.due[dst], dst))

    def _check(self, slot: int) -> None:
        if not 0 <= slot < self.count:
            raise IndexError(f"slot {slot} is not in use")

    # ---- the LRU list (non-direct records, by last heard) ------------------------------------

    def _link_tail(self, slot: int) -> None:
        self.prev[slot] = self._tail
        self.next[slot] = NIL
        if self._tail == NIL:
            self._head = slot
        else:
            self.next[self._tail] = slot
        self._tail = slot

    def _link_head(self, slot: int) -> None:
        self.next[slot] = self._head
        self.prev[slot] = NIL
        if self._head == NIL:
            self._tail = slot
        else:
            self.prev[self._head] = slot
        self._head = slot

    def _unlink(self, slot: int) -> None:
        p, n = self.prev[slot], self.next[slot]
        if p == NIL:
            self._head = n
        else:
            self.next[p] = n
        if n == NIL:
            self._tail = p
        else:
            self.prev[n] = p
        self.prev[slot] = self.next[slot] = NIL

    def touch(self, slot: int, now_ms: int) -> None:
        """Heard from at now_ms: to the LRU's tail (direct records are in no list)."""
        self.heard[slot] = now_ms
        if not self.state[slot] & S_DIRECT and self._tail != slot:
            self._unlink(slot)
            self._link_tail(slot)

    def evictable(self) -> int:
        """The non-direct record heard from least recently (what a full table evicts), or -1."""
        return -1 if self._head == NIL else self._head

    def lru(self) -> Iterable[int]:
        """The evictable records, least recently heard first (for tests and inspection)."""
        s = self._head
        while s != NIL:
            yield s
            s = self.next[s]

    def set_direct(self, slot: int, direct: bool) -> None:
        """Make a record direct (out of the LRU list, never evicted) or vague again (at the
        LRU's head: a demoted peer, silent for three Pings, is the first to go)."""
        st = self.state[slot]
        if direct and not st & S_DIRECT:
            self._unlink(slot)
            self.state[slot] = st | S_DIRECT
            self.direct.add(slot)
        elif not direct and st & S_DIRECT:
            self.state[slot] = st & ~S_DIRECT
            self.direct.discard(slot)
            self._link_head(slot)

    # ---- attempts ----------------------------------------------------------------------------

    def ours(self, slot: int) -> int:
        return self.attempts[slot] >> 4

    def seen(self, slot: int) -> int:
        return self.attempts[slot] & 0xF

    def set_attempts(self, slot: int, ours: int, seen: int) -> None:
        self.attempts[slot] = ((ours & 0xF) << 4) | (seen & 0xF)

    # ---- the due heap ------------------------------------------------------------------------

    def set_due(self, slot: int, when_ms: int) -> None:
        """Arm the record's timer at when_ms (0 disarms it)."""
        when_ms = int(when_ms)
        self.due[slot] = when_ms
        if when_ms:
            heapq_push(self._heap, (when_ms, slot))
            if len(self._heap) > 4 * self.count + 64:
                self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        """Drop stale entries: amortised O(1) per set_due."""
        self._heap = [(self.due[s], s) for s in range(self.count) if self.due[s]]
        heapq_heapify(self._heap)

    def next_due(self) -> Optional[int]:
        """The earliest armed timer (ms), or None."""
        heap = self._heap
        while heap:
            when, slot = heap[0]
            if slot < self.count and self.due[slot] == when:
                return when
            heapq_pop(heap)
        return None

    def pop_due(self, now_ms: int) -> List[int]:
        """Slots whose timer is due at now_ms, each disarmed (the caller re-arms)."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            when, slot = heapq_pop(heap)
            if slot < self.count and self.due[slot] == when:
                self.due[slot] = 0
                out.append(slot)
        return out

    # ---- round robin -------------------------------------------------------------------------

    def scan(self, cursor: int, want: int, probe: int, mask: int, match: int) -> Tuple[List[int], int]:
        """Up to `want` slots whose state & mask == match, looking at no more than `probe`
        slots from `cursor` on (wrapping); returns them and the cursor to pass next time."""
        out: List[int] = []
        n = self.count
        if n == 0:
            return out, 0
        s = cursor if cursor < n else 0
        state = self.state
        for _ in range(min(probe, n)):
            if state[s] & mask == match:
                out.append(s)
                if len(out) >= want:
                    s = s + 1 if s + 1 < n else 0
                    break
            s = s + 1 if s + 1 < n else 0
        return out, s

    # ---- time --------------------------------------------------------------------------------

    def rebase(self, shift_ms: int) -> None:
        """Move the time base shift_ms later: every time field less shift_ms, at least 0 (a
        non-zero `due` at least 1, so it stays armed). O(table), every 2**30 ms."""
        for name in TIME_FIELDS:
            arr = getattr(self, name)
            for s in range(self.count):
                v = arr[s]
                if v:
                    arr[s] = max(v - shift_ms, 1 if name == "due" else 0)
        self._rebuild_heap()

    def memory(self) -> int:
        """Bytes the twin's records take at this capacity."""
        return RECORD_BYTES * self.capacity


# The Cython twin (fastpath/swarmtable.pyx: the same API and semantics, 18 packed address bytes
# and an open-addressing index instead of the tuples and the dict) unless PELOTARI_PURE_PYTHON=1
# or the extension is not built. The twin's Full is then the one both raise.
ConnectionTable = PyConnectionTable
IMPLEMENTATION = "python"
if compiled("swarmtable") is not None:
    from fastpath.swarmtable import ConnectionTable, Full  # noqa: F401,F811
    IMPLEMENTATION = "cython"
