"""A naive asyncio fyrehose backbone: what a careless Python version reaches.

One datagram_received call per datagram, one sendto per DELIVER, a dict of subscribers.
Speaks the same protocol as the pelotari backbone (PUSH, KEEPALIVE/ACK; REQUESTs ignored).

    python bench/baseline/asyncio_backbone.py PORT
"""
import asyncio
import signal
import struct
import sys
import time

WINDOW = 5.0


class NaiveBackbone(asyncio.DatagramProtocol):
    def __init__(self):
        self.seq = 0
        self.subscribers = {}
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if not data:
            return
        kind = data[0]
        if kind == 0x02 and len(data) >= 9 and struct.unpack(">H", data[1:3])[0] == len(data) - 9:
            deliver = b"\x01" + data[1:3] + self.seq.to_bytes(6, "big") + data[9:]
            self.seq += 1
            now = time.monotonic()
            for sub, expires in list(self.subscribers.items()):
                if expires > now:
                    self.transport.sendto(deliver, sub)
        elif kind == 0x10 and len(data) == 29:
            flags = int.from_bytes(data[7:13], "big")
            if not flags & 0x1:
                self.subscribers[addr] = time.monotonic() + WINDOW
            self.transport.sendto(b"\x20" + data[13:29], addr)


async def main(port):
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(NaiveBackbone, local_addr=("127.0.0.1", port))
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"asyncio backbone listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    await stop.wait()
    transport.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
