# cython: language_level=3
"""Out-of-line part of the bounds-checked reader (the error path)."""
from fastpath.errors import TruncatedPacket


cdef int raise_truncated(Py_ssize_t offset, Py_ssize_t n, Py_ssize_t length) except -1:
    raise TruncatedPacket(
        f"field of {n} bytes at offset {offset} overruns datagram of {length} bytes")
