"""The fyrehose backbone's sans-IO core in pure Python: the reference twin of
fastpath.backbone.BackboneCore, and the socket loop that serves it without a compiler.

Same API, rules, limits, counters and drop reasons as the compiled core, and the same sends
byte for byte in the same order (tests/test_backbone_core.py runs every rule on both and feeds
both the same traffic). Where the compiled core follows memory (iovecs, its hash index), this
one follows what that memory means; (B1)..(B5) are the seed's RULES (BACKBONE).
"""
import select
import socket
import struct
import threading
import time

from fastpath import packets, refcodec
from fastpath.errors import CodecError, LengthMismatch
from fastpath.packets import (DEFAULT_PACK_LIMIT, DELIVER, FORWARD, HEADER_SIZE, INFO,
                              INFO_SIZE, KEEPALIVE, QUERY, TOKEN_SIZE,
                              KEEPALIVE_ACK, MAX_DATA, MAX_DATAGRAM, MAX_SEQUENCE, NOJOURNAL,
                              NOSUBSCRIBE, PACKED, PACK_LIMIT_SHIFT, PUSH, REQUEST)

DROP_NAMES = packets.DROP_REASONS  # the drops counters, in the compiled core's order
DELIVER_BYTE = bytes([DELIVER])
MASK64 = (1 << 64) - 1
SWEEP_INTERVAL_NS = 1_000_000_000
FULL_SWEEP_INTERVAL_NS = 10_000_000  # a full table is swept at most every 10 ms
GSO_MAX_SEGMENTS = 64  # the kernel's UDP_MAX_SEGMENTS
GSO_MAX_BYTES = 65000  # one GSO send is at most one IP datagram's worth
FRAME_CAP = 8192  # frames fanned out at once
MAX_IOV = 1024  # the kernel's UIO_MAXIOV: separate pieces of memory in one datagram
SOL_UDP, UDP_SEGMENT = 17, 103  # <netinet/udp.h>
WAKE_INTERVAL = 0.1  # seconds the loop waits for a datagram: sweeps and stop() are noticed by then


def gso_supported():
    """Whether this kernel accepts UDP_SEGMENT (Linux >= 4.18); probed on a throwaway socket."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.setsockopt(SOL_UDP, UDP_SEGMENT, 1400)
            return True
        except OSError:
            return False


class _Subscriber:
    __slots__ = ("key", "address", "expires_ns", "flags", "pack_limit", "repair_tokens",
                 "repair_ns", "since_ns", "since_seq", "delivered", "datagrams", "keepalives",
                 "requested", "refused", "forwarded")

    def __init__(self, key, now, repair_burst, since_seq=0):
        self.key = key  # (IPv4 address << 16) | port
        self.address = (socket.inet_ntoa((key >> 16).to_bytes(4, "big")), key & 0xffff)
        self.expires_ns = 0
        self.flags = 0
        self.pack_limit = 0
        self.repair_tokens = repair_burst
        self.repair_ns = now
        # Per-entry counters for the status view, as the compiled core's Subscriber has them.
        self.since_ns = now
        self.since_seq = since_seq  # the SEQUENCE next then: it holds none of ours before
        self.delivered = self.datagrams = self.keepalives = 0
        self.requested = self.refused = self.forwarded = 0


def _key(address):
    host, port = address
    return (int.from_bytes(socket.inet_aton(host), "big") << 16) | port


class BackboneCore:
    """The backbone's every rule, limit and counter, driven only by datagrams and `now` (ns)."""

    def __init__(self, *, window=5.0, max_subscribers=4096, max_data=MAX_DATA,
                 max_request_range=1024, allow_foreign_addresses=False, first_sequence=None,
                 batch=64, seed=0, gso=False, gso_max_segment=1472, packing=True,
                 max_pack=MAX_DATAGRAM, max_per_address=256, repair_rate=16384.0,
                 repair_burst=16384.0, max_pack_frames=1024, keep_sends=True):
        if max_subscribers < 1:
            raise ValueError("max_subscribers must be at least 1")
        if not 0 <= max_data <= MAX_DATA:
            raise ValueError(f"max_data must be within 0..{MAX_DATA}")
        if window <= 0:
            raise ValueError("window must be positive")
        if max_request_range < 1:
            raise ValueError("max_request_range must be at least 1")
        if not HEADER_SIZE <= max_pack <= MAX_DATAGRAM:
            raise ValueError(f"max_pack must be within {HEADER_SIZE}..{MAX_DATAGRAM}")
        if max_per_address < 0:
            raise ValueError("max_per_address must be 0 (no limit) or positive")
        if repair_rate < 0 or repair_burst < 1:
            raise ValueError("repair_rate must be >= 0 and repair_burst >= 1")
        if max_pack_frames < 2:
            raise ValueError("max_pack_frames must be at least 2")
        if not 1 <= batch <= 1024:
            raise ValueError(f"batch {batch} outside 1..1024")
        if first_sequence is None:
            first_sequence = time.time_ns() // 1000 & MAX_SEQUENCE
        if not 0 <= first_sequence <= MAX_SEQUENCE:
            raise ValueError("first_sequence must fit in 48 bits")
        self.window_ns = int(window * 1e9)
        self.max_subscribers = max_subscribers
        self.max_data = max_data
        self.max_request_range = max_request_range
        self.allow_foreign = bool(allow_foreign_addresses)
        self.next_sequence = first_sequence
        self.epoch_start = first_sequence  # the first SEQUENCE this core gave
        self.rng = seed or ((time.monotonic_ns() ^ 0xD1B54A32D192ED03) | 1) & MASK64
        self.batch = batch
        self.slot_size = HEADER_SIZE + max_data + 1  # a longer datagram arrives truncated
        self.gso = bool(gso)
        self.gso_max_segment = gso_max_segment
        self.packing = bool(packing)
        self.max_pack = max_pack
        self.max_per_address = max_per_address
        self.repair_rate = float(repair_rate)
        self.repair_burst = float(repair_burst)
        self.max_pack_frames = max_pack_frames
        self.keep_sends = keep_sends
        self._subs = []  # table order: the order of fan-out and of the FORWARD draw
        self._index = {}  # key -> _Subscriber (expired entries stay until a sweep)
        self._hosts = {}  # IPv4 address -> entries it holds (rebuilt by sweep)
        self._next_sweep_ns = 0
        self._next_full_sweep_ns = 0
        self._refused = ""
        self._frames = []  # this batch's DELIVERs, stamped: (datagram serial, bytes)
        self._serial = 0
        self._outbox = []
        self.counters = dict.fromkeys(
            ("datagrams_in", "bytes_in", "datagrams_out", "bytes_out", "pushes", "delivers",
             "keepalives", "requests", "forwards", "batches", "gso_sends", "gso_segments",
             "packs_in", "packs_out", "adopted"), 0)
        self.drops = dict.fromkeys(DROP_NAMES, 0)
        self.batch_sizes = [0] * 8  # batches of <= 1, 2, 4 ... 64 datagrams, and more
        # Backbone-cluster extension (docs/protocols/fyrehose-cluster.md): off by default.
        self._gated = False
        self._limit = 0  # the last SEQUENCE it may give (mod 2^48)
        self._until_ns = 0  # ... until then (the lease's end, the core's clock)
        self._info = None  # the INFO a QUERY is answered with (its TOKEN filled in)
        self._adopt_lock = threading.Lock()
        self._adopt = []  # entries adopt() posted, applied by the loop's next handle_timer

    # ---- the cluster extension ----

    def gate(self, limit, until_ns):
        """(Cluster member) sequence only up to SEQUENCE `limit` (mod 2^48) and only while
        now < `until_ns`; else PUSH, KEEPALIVE and REQUEST are dropped (`not_active`)."""
        self._gated = True
        self._limit = limit & MAX_SEQUENCE
        self._until_ns = until_ns

    def set_next_sequence(self, sequence):
        """(Cluster member, gated closed) the SEQUENCE the next PUSH gets: a new epoch's first."""
        if not 0 <= sequence <= MAX_SEQUENCE:
            raise ValueError("sequence must fit in 48 bits")
        self.next_sequence = sequence
        self.epoch_start = sequence
        for s in self._subs:  # (signed on before our first: they get all of it)
            s.since_seq = sequence

    def set_info(self, info):
        """(Cluster member) the 64-byte INFO a QUERY is answered with (TOKEN replaced by the
        QUERY's); None: QUERY is unexpected (a lone backbone)."""
        if info is not None and len(info) != INFO_SIZE:
            raise ValueError(f"an INFO is {INFO_SIZE} bytes")
        self._info = None if info is None else bytes(info)

    def adopt(self, entries):
        """(Cluster member, a new active) take over table entries of the old active's:
        [(host, port, flags, expires_ns)] (the core's clock), each at most `window` ahead.
        Safe from any thread: the loop applies them at its next handle_timer(), as a
        KEEPALIVE would, but unanswered and without extending what the old one granted; at
        most max_subscribers wait at once (more are dropped, `table_full`)."""
        entries = [(_key((h, p)), int(f) & MAX_SEQUENCE, int(e)) for h, p, f, e in entries]
        with self._adopt_lock:
            for entry in entries:
                if len(self._adopt) == self.max_subscribers:
                    self.drops["table_full"] += 1
                else:
                    self._adopt.append(entry)

    def _apply_adoptions(self, now):
        with self._adopt_lock:
            entries, self._adopt = self._adopt, []
        for key, flags, expires in entries:
            if expires <= now or not key & 0xffff:
                continue
            expires = min(expires, now + self.window_ns)
            s = self._upsert(key, now)
            if s is None:
                self.drops[self._refused] += 1
                continue
            if s.expires_ns >= expires:
                continue  # its own KEEPALIVE reached us: fresher than the old active's word
            if s.keepalives == 0:  # (made here) the old active's client: it holds what it had
                s.since_seq = self.epoch_start
            self.counters["adopted"] += 1
            self._set_flags(s, flags)
            s.expires_ns = expires

    def _set_flags(self, s, flags):
        s.flags = flags
        s.pack_limit = 0
        if self.packing and s.flags & PACKED:
            limit = (s.flags >> PACK_LIMIT_SHIFT) & 0xffff or DEFAULT_PACK_LIMIT
            s.pack_limit = min(max(limit, HEADER_SIZE), self.max_pack)

    def _open(self, now):
        return not self._gated or now < self._until_ns

    def _room(self, count):
        avail = (self._limit - self.next_sequence + 1) & MAX_SEQUENCE
        return not self._gated or (avail < 1 << 47 and count <= avail)

    # ---- the API ----

    def receive_datagrams(self, datagrams, now, repeat=1):
        """Handle [(datagram, (host, port))] received at `now` (ns), in receive batches of
        `batch` (a datagram past a receive slot arrives truncated); sends go to the sink.
        `repeat` feeds the same datagrams that many times (benchmarks)."""
        datagrams = [(bytes(d), a, _key(a)) for d, a in datagrams]
        for _ in range(repeat):
            for start in range(0, len(datagrams), self.batch):
                self.counters["batches"] += 1
                chunk = datagrams[start:start + self.batch]
                k = 0
                while k < 7 and len(chunk) > (1 << k):  # the compiled core's histogram buckets
                    k += 1
                self.batch_sizes[k] += 1
                for data, address, key in chunk:
                    self._handle(data, address, key, now)
                self._fan_out_pending(now)

    def datagrams_to_send(self):
        """What the handled datagrams set off since the last call, as [(datagram, (host,
        port))] in sending order (empty with keep_sends off)."""
        return [(d, address) for datagrams, address in self.sends() for d in datagrams]

    def sends(self):
        """The same as [([datagram, ...], (host, port))], one entry per send: several datagrams
        are one UDP_SEGMENT send (GSO), as the compiled core queues them."""
        out, self._outbox = self._outbox, []
        return out

    def get_timer(self):
        """When (ns) handle_timer() next has work: the sweep of expired table entries."""
        return self._next_sweep_ns

    def handle_timer(self, now):
        """Sweep expired entries out of the table if the sweep is due at `now` (ns)."""
        if self._adopt:
            self._apply_adoptions(now)
        if now >= self._next_sweep_ns:
            self._sweep(now)

    def stats(self, now):
        """Counters, and the table's live entries at `now` (ns), as a dict."""
        live = subscribers = journaling = 0
        for s in self._subs:
            if s.expires_ns > now:
                live += 1
                if not s.flags & NOSUBSCRIBE:
                    subscribers += 1
                    journaling += not s.flags & NOJOURNAL
        c = self.counters
        return {
            "datagrams_in": c["datagrams_in"], "bytes_in": c["bytes_in"],
            "datagrams_out": c["datagrams_out"], "bytes_out": c["bytes_out"],
            "send_errors": 0, "send_would_block": 0, "receive_errors": 0,
            "pushes": c["pushes"], "delivers": c["delivers"], "keepalives": c["keepalives"],
            "requests": c["requests"], "forwards": c["forwards"], "batches": c["batches"],
            "batch_sizes": list(self.batch_sizes),
            "gso": self.gso, "gso_sends": c["gso_sends"], "gso_segments": c["gso_segments"],
            "packing": self.packing, "packs_in": c["packs_in"], "packs_out": c["packs_out"],
            "adopted": c["adopted"],
            "clients": live, "subscribers": subscribers, "journaling": journaling,
            "next_sequence": self.next_sequence, "drops": dict(self.drops),
        }

    def subscribers(self, now):
        """Table entries live at `now` (ns) as [(host, port, flags, seconds_left)]."""
        return [(*s.address, s.flags, (s.expires_ns - now) / 1e9)
                for s in self._subs if s.expires_ns > now]

    def table(self, now):
        """Live table entries at `now` (ns) as dicts with their per-entry counters."""
        return [{"host": s.address[0], "port": s.address[1], "flags": s.flags,
                 "pack_limit": s.pack_limit, "seconds_left": (s.expires_ns - now) / 1e9,
                 "age": (now - s.since_ns) / 1e9, "delivered": s.delivered,
                 "datagrams": s.datagrams, "keepalives": s.keepalives,
                 "requested": s.requested, "refused": s.refused, "forwarded": s.forwarded}
                for s in list(self._subs) if s.expires_ns > now]

    # ---- receiving ----

    def _send(self, data, address):
        self.counters["datagrams_out"] += 1
        if self.keep_sends:  # (with keep_sends off, as in the compiled core, bytes are not summed)
            self.counters["bytes_out"] += len(data)
            self._outbox.append(([data], address))

    def _handle(self, data, address, key, now):
        if len(data) > self.slot_size:
            data = data[:self.slot_size]  # what the kernel leaves of it: MSG_TRUNC
            truncated = True
        else:
            truncated = False
        self.counters["datagrams_in"] += 1
        self.counters["bytes_in"] += len(data)
        if truncated:
            self.drops["oversize"] += 1
            return
        try:
            refcodec.decode(data, self.max_data)
        except LengthMismatch as exc:
            if data[0] != PUSH or not self.packing:
                self.drops[exc.reason] += 1
                return
            self._on_pack(data, key, now)  # packing extension: several PUSH frames, or malformed
            return
        except CodecError as exc:
            self.drops[exc.reason] += 1
            return
        ptype = data[0]
        if ptype == QUERY and self._info is not None:
            # (as large as the QUERY: never more bytes out than in)
            self._send(bytes([INFO]) + data[1:1 + TOKEN_SIZE] + self._info[1 + TOKEN_SIZE:],
                       address)
        elif ptype in (PUSH, KEEPALIVE, REQUEST) and not self._open(now):
            self.drops["not_active"] += 1
        elif ptype == PUSH:
            if self._room(1):
                self._on_push(data, 1, now)
            else:
                self.drops["not_active"] += 1
        elif ptype == KEEPALIVE:
            self._on_keepalive(data, address, now)
        elif ptype == REQUEST:
            self._on_request(data, address, now)
        else:
            self.drops["unexpected_type"] += 1

    def _on_pack(self, data, key, now):
        try:
            count = len(refcodec.decode_pack(data, self.max_data))
        except CodecError as exc:
            self.drops[exc.reason] += 1
            return
        s = self._index.get(key)
        if count > self.max_pack_frames:
            self.drops["pack_too_many_frames"] += 1
        elif s is None or s.expires_ns <= now or not s.pack_limit:
            self.drops["pack_not_signed_on"] += 1
        elif not self._open(now) or not self._room(count):
            self.drops["not_active"] += 1
        else:
            self.counters["packs_in"] += 1
            self._on_push(data, count, now)

    def _on_push(self, data, count, now):
        # (B3) each frame gets the next sequence number and goes to every subscriber; (B5) from
        # anyone. A PUSH frame becomes a DELIVER: type byte and UNUSED -> SEQUENCE.
        if len(self._frames) + count > FRAME_CAP:
            self._fan_out_pending(now)
        self._serial += 1
        off = 0
        while off < len(data):
            size = HEADER_SIZE + int.from_bytes(data[off + 1:off + 3], "big")
            self._frames.append((self._serial, DELIVER_BYTE + data[off + 1:off + 3]
                                 + self.next_sequence.to_bytes(6, "big")
                                 + data[off + HEADER_SIZE:off + size]))
            self.next_sequence = (self.next_sequence + 1) & MAX_SEQUENCE
            off += size
        self.counters["pushes"] += count

    def _resolve(self, data, address):
        # ADDR/PORT of zero mean "the packet's source"; anything else must be the source
        # (unless allow_foreign): nobody can aim the backbone at an address that never asked.
        src = _key(address)
        addr = int.from_bytes(data[1:5], "big") or src >> 16
        port = int.from_bytes(data[5:7], "big") or src & 0xffff
        if ((addr << 16) | port) != src and not self.allow_foreign:
            self.drops["foreign_address"] += 1
            return None
        if port == 0:
            self.drops["zero_port"] += 1
            return None
        return (addr << 16) | port

    def _on_keepalive(self, data, address, now):
        # (B1) answer with KEEPALIVE-ACK echoing TOKEN; (B2) subscriber for `window` seconds.
        self.counters["keepalives"] += 1
        key = self._resolve(data, address)
        if key is None:
            return
        s = self._upsert(key, now)
        if s is None:
            self.drops[self._refused] += 1
            return
        s.keepalives += 1
        self._set_flags(s, int.from_bytes(data[7:13], "big"))
        s.expires_ns = now + self.window_ns
        self._send(bytes([KEEPALIVE_ACK]) + data[13:29], address)

    def _on_request(self, data, address, now):
        # (B4) FORWARD to one randomly chosen journaling subscriber other than the requester,
        # from a live subscriber within its repair budget (docs: Security).
        self.counters["requests"] += 1
        key = self._resolve(data, address)
        if key is None:
            return
        lo, hi = int.from_bytes(data[7:13], "big"), int.from_bytes(data[13:19], "big")
        if hi - lo >= self.max_request_range:
            self.drops["request_too_large"] += 1
            return
        requester = self._index.get(key)
        if requester is None or requester.expires_ns <= now or requester.flags & NOSUBSCRIBE:
            self.drops["request_not_subscribed"] += 1
            return
        requester.requested += hi - lo + 1
        requester.repair_tokens += (now - requester.repair_ns) * 1e-9 * self.repair_rate
        requester.repair_tokens = min(requester.repair_tokens, self.repair_burst)
        requester.repair_ns = now
        if requester.repair_tokens < float(hi - lo + 1):
            requester.refused += 1
            self.drops["repair_budget"] += 1
            return
        requester.repair_tokens -= float(hi - lo + 1)
        chosen, total = None, 0.0
        # A range that reaches what we gave ourselves goes only to journals signed on before we
        # gave its first part (a new active's first messages: not to a client that signed on
        # again after them, which cannot hold them).
        start = self.epoch_start
        given = (self.next_sequence - start) & MAX_SEQUENCE
        need = MAX_SEQUENCE
        if (hi - start) & MAX_SEQUENCE < given:
            need = (lo - start) & MAX_SEQUENCE
            if need >= given:
                need = 0  # (it begins before our first: journals there from our first on)
        for s in self._subs:
            if s.expires_ns <= now or s.flags & (NOSUBSCRIBE | NOJOURNAL) or s.key == key:
                continue
            if need < (s.since_seq - start) & MAX_SEQUENCE:
                continue  # signed on after we gave part of the range: it cannot hold it
            if s.keepalives == 0:
                continue  # adopted, not heard from yet: perhaps gone with the old active
            # Weighted reservoir sampling, each entry weighing 1 / (entries its host holds),
            # drawn with the compiled core's xorshift64 so both choose alike.
            weight = 1.0 / (self._hosts.get(s.key >> 16) or 1)
            total += weight
            x = self.rng
            x ^= (x << 13) & MASK64
            x ^= x >> 7
            x ^= (x << 17) & MASK64
            self.rng = x
            if (x >> 11) * (1.0 / 9007199254740992.0) * total < weight:
                chosen = s
        if chosen is None:
            self.drops["no_journal_peer"] += 1
            return
        self.counters["forwards"] += 1
        chosen.forwarded += 1
        self._send(bytes([FORWARD]) + (key >> 16).to_bytes(4, "big")
                   + (key & 0xffff).to_bytes(2, "big") + data[7:19], chosen.address)

    # ---- the table ----

    def _upsert(self, key, now):
        s = self._index.get(key)
        if s is not None:
            return s
        host = key >> 16
        if len(self._subs) == self.max_subscribers or (
                self.max_per_address and self._hosts.get(host, 0) >= self.max_per_address):
            # Entries expire only in a sweep, run for a full table at most every 10 ms.
            if now < self._next_full_sweep_ns:
                self._refused = ("table_full" if len(self._subs) == self.max_subscribers
                                 else "address_limit")
                return None
            self._sweep(now)
            self._next_full_sweep_ns = now + FULL_SWEEP_INTERVAL_NS
            if len(self._subs) == self.max_subscribers:
                self._refused = "table_full"
                return None
            if self.max_per_address and self._hosts.get(host, 0) >= self.max_per_address:
                self._refused = "address_limit"
                return None
        s = _Subscriber(key, now, self.repair_burst, self.next_sequence)
        self._subs.append(s)
        self._index[key] = s
        self._hosts[host] = self._hosts.get(host, 0) + 1
        return s

    def _sweep(self, now):
        self._subs = [s for s in self._subs if s.expires_ns > now]
        self._index = {s.key: s for s in self._subs}
        self._hosts = {}
        for s in self._subs:
            self._hosts[s.key >> 16] = self._hosts.get(s.key >> 16, 0) + 1
        self._next_sweep_ns = now + SWEEP_INTERVAL_NS

    # ---- fan-out ----

    def _fan_out_pending(self, now):
        # Packing subscribers get their packs in table order as they come; plain ones get
        # frame by frame (run by run with GSO) once all are known: the compiled core's order.
        if not self._frames:
            return
        frames = [f for _, f in self._frames]
        packs = {}
        plain = []
        for s in self._subs:
            if s.expires_ns > now and not s.flags & NOSUBSCRIBE:
                self.counters["delivers"] += len(frames)
                s.delivered += len(frames)
                if s.pack_limit:
                    if s.pack_limit not in packs:
                        packs[s.pack_limit] = self._build_packs(s.pack_limit)
                    s.datagrams += len(packs[s.pack_limit])
                    for pack in packs[s.pack_limit]:
                        self.counters["packs_out"] += 1
                        self._send(pack, s.address)
                else:
                    s.datagrams += len(frames)
                    plain.append(s.address)
        if plain and not self.gso:
            for frame in frames:
                for address in plain:
                    self._send(frame, address)
        elif plain:
            for start, count in self._runs(frames):
                for address in plain:
                    if count == 1:
                        self._send(frames[start], address)
                    else:
                        self.counters["gso_sends"] += 1
                        self.counters["gso_segments"] += count
                        self._send_segments(frames[start:start + count], address)
        self._frames = []

    def _send_segments(self, segments, address):
        """One UDP_SEGMENT send: one message out, each segment a datagram on the wire."""
        self.counters["datagrams_out"] += 1
        if self.keep_sends:
            self.counters["bytes_out"] += sum(map(len, segments))
            self._outbox.append((segments, address))

    def _runs(self, frames):
        """(start, count) of each run of equal-size frames one GSO send carries."""
        runs, k = [], 0
        while k < len(frames):
            start, size = k, len(frames[k])
            k += 1
            while (k < len(frames) and k - start < GSO_MAX_SEGMENTS and len(frames[k]) == size
                   and (k - start + 1) * size <= GSO_MAX_BYTES):
                k += 1
            if k - start > 1 and size > self.gso_max_segment:
                k = start + 1  # too large to segment: one plain send each
            runs.append((start, k - start))
        return runs

    def _build_packs(self, limit):
        """The frames, in order, in datagrams of at most `limit` bytes (a larger frame goes
        alone) and of at most MAX_IOV separate pieces (frames of one PUSH are one piece)."""
        packs, j, frames = [], 0, self._frames
        while j < len(frames):
            pack, used, pieces = [], 0, 0
            while j < len(frames):
                serial, frame = frames[j]
                if pack and used + len(frame) > limit:
                    break
                if not (pack and frames[j - 1][0] == serial):
                    if pack and pieces == MAX_IOV:
                        break
                    pieces += 1
                pack.append(frame)
                used += len(frame)
                j += 1
            packs.append(b"".join(pack))
        return packs


class BackboneLoop:
    """Serves a pure-Python BackboneCore on a bound UDP socket's file descriptor until stopped:
    a plain non-blocking socket loop (a full send buffer drops and counts at once)."""

    def __init__(self, fd, *, gso=None, **options):
        self.core = BackboneCore(gso=gso_supported() if gso is None else gso, **options)
        # The descriptor stays its owner's (as for the compiled loop): detached, never closed.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, fileno=fd)
        self._stopping = threading.Event()
        self.running = False
        self._sent = self._bytes = self._errors = self._would_block = self._receive_errors = 0

    def stop(self):
        """Ask serve() to return (within WAKE_INTERVAL); safe to call from any thread."""
        self._stopping.set()

    def serve(self):
        """Run the loop until stop() is called: wait for datagrams (WAKE_INTERVAL at most),
        read a batch, hand it to the core with the monotonic clock, send what it returns."""
        if self.running:
            raise RuntimeError("the loop is already running")
        sock, core = self._sock, self.core
        sock.setblocking(False)
        self.running = True
        try:
            core.handle_timer(time.monotonic_ns())
            while not self._stopping.is_set():
                select.select([sock], [], [], WAKE_INTERVAL)
                batch = []
                while len(batch) < core.batch:
                    try:
                        batch.append(sock.recvfrom(1 << 16))
                    except BlockingIOError:
                        break
                    except OSError:
                        self._receive_errors += 1
                        break
                now = time.monotonic_ns()
                core.handle_timer(now)
                if self._stopping.is_set():
                    break  # stop()'s wake-up (and whatever came with it) is not served
                if batch:
                    core.receive_datagrams(batch, now)
                    self._send(core.sends())
        finally:
            self._stopping.clear()
            self.running = False

    def _send(self, sends):
        for datagrams, address in sends:
            try:
                if len(datagrams) == 1:
                    self._bytes += self._sock.sendto(datagrams[0], address)
                else:
                    control = [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", len(datagrams[0])))]
                    self._bytes += self._sock.sendmsg([b"".join(datagrams)], control, 0, address)
            except BlockingIOError:
                self._would_block += 1
            except OSError:
                self._errors += 1
            else:
                self._sent += 1

    def stats(self):
        """The core's counters and table size now, with what the socket actually sent."""
        snap = self.core.stats(time.monotonic_ns())
        snap.update(datagrams_out=self._sent, bytes_out=self._bytes, send_errors=self._errors,
                    send_would_block=self._would_block, receive_errors=self._receive_errors)
        return snap

    def subscribers(self):
        """Live table entries as [(host, port, flags, seconds_left)]."""
        return self.core.subscribers(time.monotonic_ns())

    def table(self):
        """Live table entries with their per-entry counters (BackboneCore.table)."""
        return self.core.table(time.monotonic_ns())

    def __del__(self):
        if hasattr(self, "_sock"):
            self._sock.detach()
