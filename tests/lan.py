"""The namespaced-LAN test harness (it lives in pelotari.netlab, which lan-demo uses too)."""
from pelotari.netlab import Host, LanHarness, available  # noqa: F401
