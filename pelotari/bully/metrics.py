"""What a running bully node shows at `--metrics` (pelotari.metrics): its counters, messages
sent by name, leadership and clock as Prometheus metrics, every peer it knows at /status."""
PREFIX = "pelotari_bully_"


class BullyMetrics:
    """A MetricsSource for a running bully Node (read on its loop: pelotari.metrics.OnLoop)."""

    def __init__(self, node):
        self.node = node

    def collect(self):
        """Counters, drops by reason, messages sent by name, leadership and clock, now."""
        from pelotari.metrics import counters_by, gauge, gauges_by, stats_families

        node, core = self.node, self.node.core
        now = node._now()
        yield from stats_families(PREFIX, node.all_stats())
        yield counters_by(PREFIX + "messages_sent", "Messages sent, by name (the seed's 13).",
                          "message", dict(sorted(core.sent.items())))
        yield gauge(PREFIX + "is_leader", "1 while this node leads the network.",
                    int(core.is_leader))
        yield gauge(PREFIX + "id", "This node's ID (0 before it has one).", core.id)
        yield gauges_by(PREFIX + "leader_info", "The leader this node follows (value 1).",
                        "leader", {f"{core.leader.host}:{core.leader.port} ID {core.leader.id}"
                                   if core.leader else "none": 1})
        yield gauge(PREFIX + "neighbours", "Peers this node was given.", len(core.peers()))
        yield gauge(PREFIX + "known_peers", "Peers this node knows of.", len(core.book))
        yield gauge(PREFIX + "connections", "TCP connections open or being opened.",
                    node.connections)
        yield gauge(PREFIX + "clock_offset_seconds",
                    "The logical clock minus the system clock.", core.clock.offset(now))

    def status(self) -> dict:
        """Counters and every peer known: ID, address, neighbour or not, first hand or
        heard of, seconds since heard."""
        node, core = self.node, self.node.core
        now = node._now()
        neighbours = {p.id for p in core.peers()}
        entries = [{"id": i, "address": f"{k.peer.host}:{k.peer.port}",
                    "neighbour": i in neighbours, "leader": bool(core.leader and core.leader.id == i),
                    "first_hand": k.first_hand, "seconds_since_heard": round(now - k.heard, 3)}
                   for i, k in list(core.book.items())]
        return {"protocol": "bully", "id": core.id, "is_leader": core.is_leader,
                "leader": None if core.leader is None else
                f"{core.leader.host}:{core.leader.port}",
                "connections": node.connections, "stats": dict(node.all_stats()),
                "sent": dict(core.sent), "entries": entries}
