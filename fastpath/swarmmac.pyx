# cython: language_level=3, boundscheck=False, wraparound=False
"""HMAC-SHA256 of swarm datagrams in C (docs/protocols/swarm.md: the MAC sits right after the
4-byte header and covers header || body). OpenSSL's SHA-256 (SHA-NI where the CPU has it) on
precomputed inner and outer states per (key, epoch): a MAC of a small datagram costs two
compression rounds and no Python object. The same MACs as pelotari.swarm.wire.Keyring."""
cimport cython
from libc.stdint cimport uint8_t
from libc.string cimport memcpy, memset

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE


@cython.final
cdef class MacSet:
    """The HMAC-SHA256 states of the (key, epoch) pairs a node accepts, one of them signing.
    load() takes the epoch keys (derived by the Keyring, a few times a minute); mac/sign/verify
    are the per-datagram work."""

    def __cinit__(self):
        self.count = 0
        self.signer = -1

    def load(self, keys, int signer=0):
        """Install the states for `keys` (each 1..64 bytes: epoch keys are 32), the one at
        index `signer` signing; verify tries them in this order."""
        keys = [bytes(x) for x in keys]  # (not `k`: that name is a C pointer here)
        if not 1 <= len(keys) <= SWARM_MAX_STATES:
            raise ValueError(f"1 to {SWARM_MAX_STATES} keys, not {len(keys)}")
        if not 0 <= signer < len(keys):
            raise ValueError("signer is not one of the keys")
        cdef uint8_t ipad[64]
        cdef uint8_t opad[64]
        cdef const uint8_t* k
        cdef bytes key
        cdef Py_ssize_t n, j
        cdef int i
        for i in range(len(keys)):
            key = keys[i]
            n = PyBytes_GET_SIZE(key)  # a key may hold zero bytes anywhere
            if not 1 <= n <= 64:
                raise ValueError("a key is 1 to 64 bytes")
            k = <const uint8_t*>PyBytes_AS_STRING(key)
            memset(ipad, 0x36, 64)
            memset(opad, 0x5C, 64)
            for j in range(n):
                ipad[j] ^= k[j]
                opad[j] ^= k[j]
            SHA256_Init(&self.states[i].inner)
            SHA256_Update(&self.states[i].inner, ipad, 64)
            SHA256_Init(&self.states[i].outer)
            SHA256_Update(&self.states[i].outer, opad, 64)
        self.count = len(keys)
        self.signer = signer

    cdef void mac_parts(self, int index, const uint8_t* header, const uint8_t* body,
                        size_t body_len, uint8_t* out) noexcept nogil:
        cdef SHA256_CTX c
        cdef uint8_t inner[32]
        memcpy(&c, &self.states[index].inner, sizeof(SHA256_CTX))
        SHA256_Update(&c, header, SWARM_HEADER)
        if body_len:
            SHA256_Update(&c, body, body_len)
        SHA256_Final(inner, &c)
        memcpy(&c, &self.states[index].outer, sizeof(SHA256_CTX))
        SHA256_Update(&c, inner, 32)
        SHA256_Final(out, &c)

    cdef void sign_in_place(self, uint8_t* datagram, size_t n) noexcept nogil:
        """datagram = header, 32 bytes of room, body (n >= 36): the MAC written into the room."""
        self.mac_parts(self.signer, datagram, datagram + SWARM_PREFIX, n - SWARM_PREFIX,
                       datagram + SWARM_HEADER)

    cdef int verify_raw(self, const uint8_t* datagram, size_t n) noexcept nogil:
        """The index of the state whose MAC the datagram carries, or -1 (also when shorter
        than header + MAC). Constant-time comparison."""
        cdef uint8_t tag[32]
        cdef int i
        if n < SWARM_PREFIX:
            return -1
        for i in range(self.count):
            self.mac_parts(i, datagram, datagram + SWARM_PREFIX, n - SWARM_PREFIX, tag)
            if CRYPTO_memcmp(tag, datagram + SWARM_HEADER, SWARM_MAC) == 0:
                return i
        return -1

    def mac(self, const uint8_t[::1] content not None, int index=-1):
        """HMAC-SHA256 over content = header || body (the signer's, or state `index`'s)."""
        if content.shape[0] < SWARM_HEADER:
            raise ValueError("content shorter than the header")
        if index < 0:
            index = self.signer
        if not 0 <= index < self.count:
            raise ValueError("no such state (load() first)")
        out = PyBytes_FromStringAndSize(NULL, SWARM_MAC)
        self.mac_parts(index, &content[0],
                       &content[SWARM_HEADER] if content.shape[0] > SWARM_HEADER else NULL,
                       content.shape[0] - SWARM_HEADER, <uint8_t*>PyBytes_AS_STRING(out))
        return out

    def sign(self, const uint8_t[::1] content not None):
        """The datagram for content = header || body: the signer's MAC after the header."""
        cdef Py_ssize_t n = content.shape[0]
        if n < SWARM_HEADER:
            raise ValueError("content shorter than the header")
        if self.signer < 0:
            raise ValueError("no keys (load() first)")
        out = PyBytes_FromStringAndSize(NULL, n + SWARM_MAC)
        cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
        memcpy(p, &content[0], SWARM_HEADER)
        if n > SWARM_HEADER:
            memcpy(p + SWARM_PREFIX, &content[SWARM_HEADER], n - SWARM_HEADER)
        self.sign_in_place(p, n + SWARM_MAC)
        return out

    def verify(self, const uint8_t[::1] datagram not None):
        """The index of the state that verifies the datagram, or -1."""
        if datagram.shape[0] < SWARM_PREFIX:
            return -1
        return self.verify_raw(&datagram[0], datagram.shape[0])
