"""prototari's wire table: its messages, the data framing and the ports, defined once.

The core, the scapy layer (pelotari/layers/prototari.py) and the CLI derive from this module;
a new message is one MESSAGES entry plus its handling in the core. See prototari.md.
"""
DISCOVER = b"pelotari?"  # 1a: broadcast, "who is there?"
RESPOND = b"aupa!"  # 1b: the answer to a DISCOVER
CONFIRM = b"dale!"  # 1c: completes the handshake
PING = b"hor?"  # 2: heartbeat
PONG = b"hemen nago!"  # 2: the heartbeat's answer
# Control message -> its name (what the scapy layer and `pelotari inspect` show; craft's
# type is the name in lower case).
MESSAGES = {DISCOVER: "DISCOVER", RESPOND: "RESPOND", CONFIRM: "CONFIRM", PING: "HEARTBEAT",
            PONG: "HEARTBEAT-ANSWER"}
CONTROL = frozenset(MESSAGES)
# A data frame: this magic, then the application's bytes. It starts with a byte no control
# string starts with, so a data frame can never be mistaken for one (or one for data).
DATA_MAGIC = b"\x01PTD"
MAX_DATAGRAM = 65507  # IPv4 UDP payload
MAX_DATA = MAX_DATAGRAM - len(DATA_MAGIC)

BROADCAST_PORT = 21451
UNICAST_PORT = 21450
