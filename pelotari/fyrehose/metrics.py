"""What a running backbone shows at `--metrics` (pelotari.metrics): its counters as Prometheus
metrics, and its subscriber table with per-entry counters as the /status view."""
from fastpath.packets import FLAG_NAMES

PREFIX = "pelotari_fyrehose_"

# (stats key, metric name without _total, help) for every counter of Backbone.stats().
COUNTERS = (
    ("datagrams_in", "datagrams_received", "Datagrams received (every type, good or bad)."),
    ("bytes_in", "bytes_received", "Bytes of datagrams received."),
    ("datagrams_out", "send_calls", "Sends made: a GSO send of several DELIVERs counts once."),
    ("bytes_out", "bytes_sent", "Bytes sent."),
    ("send_errors", "send_errors", "Sends the kernel refused (other than would-block)."),
    ("send_would_block", "send_would_block", "Sends dropped because the socket buffer was full."),
    ("receive_errors", "receive_errors", "Failed receive calls."),
    ("pushes", "pushes", "PUSH messages sequenced."),
    ("delivers", "delivers", "DELIVER messages sent (one per message per subscriber)."),
    ("keepalives", "keepalives", "KEEPALIVEs received."),
    ("requests", "requests", "REQUESTs received."),
    ("forwards", "forwards", "FORWARDs sent to journaling subscribers."),
    ("batches", "receive_batches", "Receive batches (recvmmsg calls that returned datagrams)."),
    ("gso_sends", "gso_sends", "UDP GSO sends (each carries several DELIVERs)."),
    ("gso_segments", "gso_segments", "DELIVER datagrams sent inside GSO sends."),
    ("packs_in", "packed_pushes", "Packed PUSH datagrams (packing extension) received."),
    ("packs_out", "packed_delivers", "Packed DELIVER datagrams (packing extension) sent."),
)
# Upper bounds of the receive-batch histogram's buckets (the cores count batches of at most
# 1, 2, 4 ... 64 datagrams, and more: fastpath/backbone.pyx receive_batch).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, float("inf"))
GAUGES = (
    ("clients", "clients", "Live table entries (subscribers and publishers that sign on)."),
    ("subscribers", "subscribers", "Live entries that receive DELIVERs."),
    ("journaling", "journaling_subscribers", "Live subscribers that answer FORWARDs."),
    ("next_sequence", "next_sequence", "SEQUENCE the next PUSH will be given."),
    ("uptime", "uptime_seconds", "Seconds since the backbone started."),
)


def flag_names(flags: int) -> list:
    """A KEEPALIVE's FLAGS as the wire table's names (PACKED's limit as pack_limit, apart)."""
    return [name for bit, name in enumerate(FLAG_NAMES) if flags >> bit & 1]


class BackboneMetrics:
    """A MetricsSource (pelotari.metrics) for a running Backbone."""

    def __init__(self, backbone):
        self.backbone = backbone
        # (--cluster) the member's status (ClusterBackbone.status), once it runs
        self.cluster = None

    def collect(self):
        """The backbone's counters, gauges and drops by reason, read now."""
        from pelotari.metrics import counter, counters_by, gauge, histogram

        stats = self.backbone.stats()
        for key, name, doc in COUNTERS:
            yield counter(PREFIX + name, doc, stats[key])
        yield counters_by(PREFIX + "drops", "Datagrams dropped, by reason (docs/protocols/"
                          "fyrehose.md, Errors).", "reason", stats["drops"])
        yield counter(PREFIX + "repair_budget_refusals",
                      "REQUESTs refused for the requester's repair budget.",
                      stats["drops"].get("repair_budget", 0))
        for key, name, doc in GAUGES:
            yield gauge(PREFIX + name, doc, stats[key])
        cumulative, buckets = 0, []
        for bound, count in zip(BATCH_BUCKETS, stats["batch_sizes"]):
            cumulative += count
            buckets.append((bound, cumulative))
        yield histogram(PREFIX + "receive_batch_size", "Datagrams per receive batch (recvmmsg "
                        "call): batches near 64 mean the backbone is busy.", buckets,
                        stats["datagrams_in"])
        if self.cluster is not None:
            yield from self._cluster_metrics(self.cluster())

    @staticmethod
    def _cluster_metrics(c: dict):
        from pelotari.metrics import counter, gauge, gauges_by

        yield gauges_by(PREFIX + "cluster_role", "This cluster member's role: 1 for the one "
                        "it has (active, candidate, standby).", "role",
                        {r: int(c["role"] == r) for r in ("active", "candidate", "standby")})
        yield gauge(PREFIX + "cluster_epoch", "The epoch it serves (active) or follows.",
                    c["epoch"])
        yield gauge(PREFIX + "cluster_may_sequence", "1 while it may sequence (active, within "
                    "its lease and reservation).", int(c["may_sequence"]))
        yield gauge(PREFIX + "cluster_lag_sequences", "(Standby) sequences the active gave "
                    "that its journal does not hold yet (-1: not known).",
                    -1 if c["lag"] is None else c["lag"])
        yield counter(PREFIX + "cluster_became_active", "Times this member became the active "
                      "(a failover, or the first election).", c["became_active"])
        if c.get("floating") is not None:
            yield gauge(PREFIX + "cluster_floating_held", "(--floating-address) 1 while this "
                        "member holds the floating address.", int(c["floating"]["held"]))

    def status(self) -> dict:
        """Counters and the subscriber table; each entry's `loss_hint` is the share of the
        sequences it was sent that it asked again for (REQUESTed): a lossy or slow reader."""
        stats = self.backbone.stats()
        entries = []
        for e in self.backbone.table():
            e = {"address": f"{e.pop('host')}:{e.pop('port')}", **e}
            e["flags"] = flag_names(e["flags"])
            e["loss_hint"] = round(e["requested"] / e["delivered"], 6) if e["delivered"] else 0.0
            e["seconds_left"] = round(e["seconds_left"], 3)
            e["age"] = round(e["age"], 3)
            entries.append(e)
        out = {"protocol": "fyrehose", "role": "backbone",
               "address": "%s:%d" % self.backbone.address[:2], **stats, "entries": entries}
        if self.cluster is not None:
            out["cluster"] = self.cluster()
        return out
