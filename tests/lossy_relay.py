"""A real UDP relay on 127.0.0.1 that drops a chosen fraction of DELIVERs on their way to a client.

The client treats the relay as its backbone. Everything the client sends goes on to the
backbone from the relay's socket; everything else that reaches the relay (the backbone's
DELIVERs and FORWARDs, peers' repair DELIVERs) goes on to the client, except the dropped ones.
"""
import random
import select
import socket
import threading


class LossyRelay:
    """Relay between one client and a backbone, dropping DELIVERs with probability `loss`."""

    def __init__(self, backbone, loss, seed=1, drop_sequences=(), drop_once=(), host="127.0.0.1"):
        self.backbone = backbone
        self.loss = loss
        self.drop_sequences = set(drop_sequences)  # always dropped, on every path
        self.drop_once = set(drop_once)  # the first copy is dropped; repairs pass
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.client = None
        self.dropped = 0
        self.passed = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def address(self):
        return self.sock.getsockname()

    def _run(self):
        while not self._stop:
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            data, src = self.sock.recvfrom(70000)
            if self.client is None or src == self.client:
                self.client = src
                self.sock.sendto(data, self.backbone)
                continue
            if data[:1] == b"\x01":
                seq = int.from_bytes(data[3:9], "big")
                if seq in self.drop_once:
                    self.drop_once.discard(seq)
                    self.dropped += 1
                    continue
                if seq in self.drop_sequences or self.rng.random() < self.loss:
                    self.dropped += 1
                    continue
            self.passed += 1
            self.sock.sendto(data, self.client)

    def close(self):
        self._stop = True
        self._thread.join(1)
        self.sock.close()
