"""What a running swarm node shows at `--metrics` (pelotari.metrics): its counters, drops and
limits by reason and connection table as Prometheus metrics, every connection at /status."""
from collections import Counter

PREFIX = "pelotari_swarm_"
# Counter names (docs/protocols/swarm.md, "Events") that count a datagram dropped or refused:
# exported as one `drops` family labelled by the name.
DROP_PREFIXES = ("ignored_", "limited_", "refused_", "dropped_")


class SwarmMetrics:
    """A MetricsSource for a running swarm Node."""

    def __init__(self, node):
        self.node = node

    def collect(self):
        """The node's counters, drops by reason and its table by status, now."""
        from pelotari.metrics import gauge, gauges_by, stats_families

        yield from stats_families(PREFIX, self.node.stats, DROP_PREFIXES)
        by_status = Counter(c.status for c in self.node.connections())
        yield gauges_by(PREFIX + "connections", "Connections in the table, by status.", "status",
                        {s: by_status.get(s, 0)
                         for s in ("direct", "vague", "connecting", "half_open")})
        yield gauge(PREFIX + "known", "Peers heard of and not contacted yet.",
                    len(self.node.known()))

    def status(self) -> dict:
        """Counters and the connection table: per connection, status, round trip, missed."""
        entries = [{"address": f"{c.address[0]}:{c.address[1]}", "status": c.status,
                    "rtt_ms": None if c.rtt is None else round(c.rtt * 1e3, 3),
                    "missed": c.missed} for c in self.node.connections()]
        return {"protocol": "swarm", "stats": dict(self.node.stats),
                "known": len(self.node.known()), "entries": entries}
