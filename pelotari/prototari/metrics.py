"""What a running prototari node shows at `--metrics` (pelotari.metrics): its counters, drops by
reason and peer list as Prometheus metrics, each peer's state at /status."""
PREFIX = "pelotari_prototari_"


class PrototariMetrics:
    """A MetricsSource for a running prototari Node."""

    def __init__(self, node):
        self.node = node

    def collect(self):
        """The node's counters (docs/protocols/prototari.md) and its table's sizes, now."""
        from pelotari.metrics import gauge, stats_families

        core = self.node.core
        yield from stats_families(PREFIX, core.stats)
        yield gauge(PREFIX + "peers", "Registered peers.", len(core.peers))
        yield gauge(PREFIX + "reservations", "Spots held for peers mid-handshake.",
                    len(core.reservations))
        yield gauge(PREFIX + "max_peers", "The peer list's limit.", core.config.max_peers)

    def status(self) -> dict:
        """Counters and the peer list: per peer, seconds since heard, missed heartbeats,
        answers and DATA received."""
        core = self.node.core
        now = self.node._now()
        entries = [{"address": f"{host}:{port}", "seconds_since_heard": round(now - p.last_seen, 3),
                    "missed": p.missed, "pongs": p.pongs, "messages": p.messages,
                    "heartbeat_pending": p.heartbeat_deadline is not None}
                   for (host, port), p in list(core.peers.items())]
        return {"protocol": "prototari", "stats": dict(core.stats),
                "reservations": len(core.reservations), "entries": entries}
