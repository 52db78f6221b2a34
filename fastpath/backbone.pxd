cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from posix.uio cimport iovec
from fastpath.csocket cimport sockaddr_in
from fastpath.batchio cimport RecvBatch, SendBatch
from cpython.pythread cimport PyThread_type_lock

# Drop reasons (DROP_* and N_DROPS) come from the wire table: fastpath/packets.py DROP_REASONS.
from fastpath.codec cimport N_DROPS

cdef struct Subscriber:
    uint64_t key          # (IPv4 address << 16) | port, host byte order
    sockaddr_in sa        # where DELIVERs and FORWARDs go
    int64_t expires_ns    # the core's clock (ns); live while now < expires_ns
    uint64_t flags
    uint32_t pack_limit   # packing extension: largest datagram it accepts; 0 = plain
    double repair_tokens  # REQUEST budget in sequences (token bucket)
    int64_t repair_ns     # when repair_tokens was last refilled
    # Per-entry counters for the status view (--metrics /status); zeroed when the entry is made.
    int64_t since_ns      # when this entry was made (the core's clock)
    uint64_t since_seq    # the SEQUENCE next at that moment: it holds none of ours before
    uint64_t delivered    # DELIVER frames sent to it
    uint64_t datagrams    # DELIVER datagrams sent to it (a pack counts once)
    uint64_t keepalives   # KEEPALIVEs from it
    uint64_t requested    # sequences it REQUESTed (accepted and refused)
    uint64_t refused      # REQUESTs refused for its repair budget
    uint64_t forwarded    # FORWARDs it was asked to answer

cdef struct Counters:
    uint64_t datagrams_in
    uint64_t bytes_in
    uint64_t pushes
    uint64_t delivers
    uint64_t keepalives
    uint64_t requests
    uint64_t forwards
    uint64_t receive_errors
    uint64_t batches
    uint64_t batch_sizes[8]  # receive batches of <= 1, 2, 4 ... 64 datagrams, and more
    uint64_t packs_in       # PUSH datagrams holding more than one frame
    uint64_t packs_out      # DELIVER datagrams sent to packing subscribers
    uint64_t gso_sends
    uint64_t gso_segments
    uint64_t adopted        # (cluster) table entries taken over from the old active
    uint64_t drops[N_DROPS]

cdef struct Adoption:     # (cluster) a table entry of the old active's, for adopt()
    uint64_t key
    uint64_t flags
    int64_t expires_ns

cdef struct Slot:
    uint8_t scratch[64]   # ACK type byte, FORWARD or INFO for this datagram
    iovec iov[2]

cdef struct Pack:
    int iov_start         # into BackboneCore.pack_iov
    int iov_count
    int frames

@cython.final
cdef class BackboneCore:
    cdef int64_t window_ns
    cdef Py_ssize_t max_data
    cdef uint64_t max_request_range
    cdef bint allow_foreign
    cdef uint64_t next_seq
    cdef uint64_t rng
    cdef Counters c
    cdef RecvBatch rx            # receive slots: the adapter (or receive_datagrams) fills them
    cdef SendBatch tx            # the send queue: iovecs into rx's slots and the arrays below
    cdef int sink_fd             # flush sink: the adapter's socket; -1 = in memory
    cdef bint keep_sends         # in memory: keep the sends for datagrams_to_send(), else count
    cdef list outbox             # the in-memory sink's [(datagram, (host, port))]
    cdef Slot* slots
    cdef Subscriber* subs
    cdef Subscriber** plain      # this fan-out's live plain subscribers
    cdef int nplain
    cdef int nsubs
    cdef int max_subs
    cdef int* index        # open-addressing hash: subscriber index + 1, 0 = empty
    cdef uint64_t index_mask
    cdef uint64_t* host_keys     # open-addressing hash of source hosts: IPv4 + 1, 0 = empty
    cdef int* host_counts        # table entries per host (rebuilt by sweep)
    cdef int max_per_address     # 0 = no per-host limit
    cdef double repair_rate      # sequences per second a requester's budget refills
    cdef double repair_burst     # sequences a requester may REQUEST at once
    cdef Py_ssize_t max_pack_frames
    cdef int64_t next_full_sweep_ns  # a full table is swept at most this often
    cdef int refused             # why upsert() last returned NULL (a DROP_ reason)
    cdef int64_t next_sweep_ns   # the timer: when expired entries are next swept out
    cdef readonly bint gso       # DELIVER runs go to each subscriber in one UDP_SEGMENT send
    cdef Py_ssize_t gso_max_segment
    cdef readonly bint packing   # accept packed PUSHes; honour the PACKED KEEPALIVE flag
    cdef Py_ssize_t max_pack
    # This batch's DELIVERs, stamped in place in the receive slots: one iovec per frame.
    cdef iovec* frames
    cdef int nframes
    cdef int* run_start          # GSO runs of equal-size frames (count 1 = sent plain)
    cdef int* run_count
    cdef int nruns
    cdef uint8_t* gso_ctrl       # one UDP_SEGMENT control message per run of frames
    cdef size_t ctrl_space
    cdef iovec* pack_iov         # the frames grouped for packing subscribers (contiguous merged)
    cdef Pack* packs
    cdef int npacks
    cdef Py_ssize_t packs_limit  # the limit `packs` was built for; 0 = not built
    # Backbone-cluster extension (off unless gate() / set_info() are called)
    cdef uint64_t epoch_start    # the first SEQUENCE this core gave (set_next_sequence moves it)
    cdef bint gated              # sequence only up to limit_seq, only while now < until_ns
    cdef uint64_t limit_seq
    cdef int64_t until_ns
    cdef bint has_info           # QUERY is answered with `info` (its TOKEN the QUERY's)
    cdef uint8_t info[64]
    # adopt()'s mailbox: written by any thread under the lock, applied by the loop's on_timer
    cdef PyThread_type_lock adopt_lock
    cdef Adoption* adoptions
    cdef Py_ssize_t nadoptions
    cdef bint adopt_pending

    cdef void receive_batch(self, int count, int64_t now) noexcept nogil
    cdef void count_batch(self, int count) noexcept nogil
    cdef void end_batch(self, int64_t now) noexcept nogil
    cdef void on_timer(self, int64_t now) noexcept nogil
    cdef void apply_adoptions(self, int64_t now) noexcept nogil
    cdef void set_flags(self, Subscriber* s, uint64_t flags) noexcept nogil
    cdef void fill_slot(self, int i, const char* data, Py_ssize_t n, sockaddr_in* sa) noexcept nogil
    cdef void collect(self) noexcept
    cdef void handle(self, int i, int64_t now) noexcept nogil
    cdef void on_push(self, uint8_t* p, Py_ssize_t n, Py_ssize_t count, int64_t now) noexcept nogil
    cdef bint closed(self, Py_ssize_t count, int64_t now) noexcept nogil
    cdef void on_query(self, int i, const uint8_t* p) noexcept nogil
    cdef void on_keepalive(self, int i, const uint8_t* p, int64_t now) noexcept nogil
    cdef void on_request(self, int i, const uint8_t* p, int64_t now) noexcept nogil
    cdef bint resolve_addr(self, int i, const uint8_t* p, uint32_t* addr, uint32_t* port) noexcept nogil
    cdef Subscriber* upsert(self, uint64_t key, int64_t now) noexcept nogil
    cdef Subscriber* find(self, uint64_t key) noexcept nogil
    cdef int* host_slot(self, uint32_t addr, bint insert) noexcept nogil
    cdef bint packer(self, int i, int64_t now) noexcept nogil
    cdef void sweep(self, int64_t now) noexcept nogil
    cdef void queue(self, sockaddr_in* dst, iovec* iov, int iovlen, void* control=*,
                    size_t controllen=*) noexcept nogil
    cdef void fan_out_plain(self) noexcept nogil
    cdef void fan_out_packed(self, Subscriber* s) noexcept nogil
    cdef void build_packs(self, Py_ssize_t limit) noexcept nogil
    cdef void fan_out_pending(self, int64_t now) noexcept nogil
    cdef void flush(self) noexcept nogil


@cython.final
cdef class BackboneLoop:
    cdef int fd
    cdef volatile int stopping
    cdef readonly bint running
    cdef readonly BackboneCore core
