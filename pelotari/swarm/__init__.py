"""Swarm peer discovery (swarm-peer-discovery.md): a UDP protocol that holds tens of thousands
of connections with minimal, predictable state; every datagram carries an HMAC-SHA256 under a
network key that changes every epoch.

wire.py is the wire format (one table, the codec, the Keyring); the decisions are in
docs/protocols/swarm.md. The connection table, the sans-IO core and the CLI are to come.
"""
from pelotari.swarm.wire import (
    DEFAULT_PORT,
    DROP_COUNTERS,
    MAX_DATAGRAM,
    TABLE,
    Entry,
    Keyring,
    Limits,
    Message,
    SwarmError,
    decode,
    encode,
    parse,
)

__all__ = ["DEFAULT_PORT", "DROP_COUNTERS", "MAX_DATAGRAM", "TABLE", "Entry", "Keyring",
           "Limits", "Message", "SwarmError", "decode", "encode", "parse"]
