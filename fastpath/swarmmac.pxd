cimport cython
from libc.stdint cimport uint8_t

cdef extern from "openssl/sha.h" nogil:
    ctypedef struct SHA256_CTX:
        pass
    int SHA256_Init(SHA256_CTX* c)
    int SHA256_Update(SHA256_CTX* c, const void* data, size_t n)
    int SHA256_Final(unsigned char* md, SHA256_CTX* c)

cdef extern from "openssl/crypto.h" nogil:
    int CRYPTO_memcmp(const void* a, const void* b, size_t n)

cdef enum:
    SWARM_HEADER = 4       # Type u16, Flags u16
    SWARM_MAC = 32         # HMAC-SHA256 right after the header
    SWARM_PREFIX = 36
    SWARM_MAX_STATES = 8   # keys x accepted epochs (3 x 2 by default)


cdef struct MacState:
    SHA256_CTX inner       # SHA-256 after the key block XOR ipad
    SHA256_CTX outer       # ... XOR opad


@cython.final
cdef class MacSet:
    """The HMAC-SHA256 states of the (key, epoch) pairs a node accepts, one of them signing."""
    cdef MacState states[SWARM_MAX_STATES]
    cdef readonly int count
    cdef readonly int signer

    cdef void mac_parts(self, int index, const uint8_t* header, const uint8_t* body,
                        size_t body_len, uint8_t* out) noexcept nogil
    cdef void sign_in_place(self, uint8_t* datagram, size_t n) noexcept nogil
    cdef int verify_raw(self, const uint8_t* datagram, size_t n) noexcept nogil
