"""Bench results: one JSON-lines record per (system, scenario) run, with the environment."""
import datetime
import json
import os
import pathlib
import platform
import subprocess
from typing import Iterable, List

import pelotari
from fastpath import implementation
from pelotari.harness import source_tree

PEERS = ("redis", "nats", "zeromq")


def environment() -> dict:
    """Where and on what a run happened: commit, time, cores, kernel, Python, which
    implementation (Cython build or pure-Python twins), versions."""
    root = source_tree()
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        commit = "unknown"
    cpu_model = "unknown"
    try:  # /proc/cpuinfo by hand: psutil has no CPU model name, platform.processor() is often ""
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "commit": commit,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cores": os.cpu_count(),
        "cpu": cpu_model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pelotari": pelotari.__version__,
        # PELOTARI_PURE_PYTHON=1 reaches the systems started by the bench too: say which ran.
        "implementation": "python" if implementation.PURE_PYTHON else "cython",
        "versions": _library_versions(),
    }


def _library_versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("cython", "numpy", "pyspark", "scapy", "click"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def record(system: str, scenario, search, env: dict, placement: str, duration: float,
           version: str = "") -> dict:
    """The JSON-lines record of one system on one scenario."""
    rep = search.repeats
    lat = search.latency()
    sent = sum(r.sent for r in rep)
    return {
        "kind": "bench",
        "system": system,
        "system_version": version,
        "scenario": scenario.name,
        "payload": scenario.payload,
        "subscribers": scenario.subscribers,
        "publishers": scenario.publishers,
        "lossless_rate": search.rate,
        "delivered_rate": search.median("delivered_rate"),
        "ingress_rate": search.median("ingress_rate"),
        "loss": search.median("loss"),
        "latency_p50_us": lat.get("p50_ns", 0) / 1000,
        "latency_p90_us": lat.get("p90_ns", 0) / 1000,
        "latency_p99_us": lat.get("p99_ns", 0) / 1000,
        "latency_max_us": lat.get("max_ns", 0) / 1000,
        "server_cpu_s": sum(r.server_cpu for r in rep) / len(rep) if rep else 0.0,
        "server_cpu_us_per_msg": (sum(r.server_cpu for r in rep) / sent * 1e6) if sent else 0.0,
        "client_bound": any(r.client_bound for r in rep),
        "notes": sorted({n for r in rep for n in r.notes}),
        "duration_s": duration,
        "placement": placement,
        "runs": [r.as_dict() for r in rep],
        "probes": len(search.probes),
        "env": env,
    }


def combine_rounds(rounds: List[dict]) -> dict:
    """One record from a system's records of several interleaved rounds of a scenario: the
    round with the median delivered rate (the lower one of an even count), with every round's
    rates under "rounds". A system that never ran stays a skipped record."""
    ran = [r for r in rounds if r.get("kind") == "bench"]
    if not ran:
        return rounds[-1]
    if len(rounds) == 1:
        return ran[0]
    ordered = sorted(ran, key=lambda r: r["delivered_rate"])
    median = dict(ordered[(len(ordered) - 1) // 2])
    median["rounds"] = [{"lossless_rate": r["lossless_rate"], "delivered_rate": r["delivered_rate"],
                         "loss": r["loss"], "server_cpu_us_per_msg": r["server_cpu_us_per_msg"]}
                        for r in ran]
    median["rounds_run"] = len(rounds)
    return median


def skipped(system: str, reason: str, env: dict) -> dict:
    """The record of a system that could not run."""
    return {"kind": "bench-skipped", "system": system, "reason": reason, "env": env}


def write(path: pathlib.Path, records: Iterable[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")


def _rate(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


# The ratios the performance targets are stated in (numerator, denominator); "best peer" is the
# fastest of Redis, NATS and ZeroMQ in that scenario. A pair shows when both systems ran.
RATIOS = [("pelotari-plain", "reference"), ("pelotari", "reference"),
          ("pelotari", "reference-gso"), ("pelotari", "best peer"), ("pelotari-packed", "redis"),
          ("pelotari-packed", "nats"), ("pelotari-packed", "best peer")]
# Latency and server CPU per message are shown for these, when they ran.
OWN = ("pelotari", "pelotari-plain", "pelotari-packed", "pelotari-gro")


def table(records: List[dict], systems: List[str]) -> str:
    """The side-by-side Markdown table: delivered msgs/s per system, the target ratios, and
    pelotari's p99 latency and server CPU per message."""
    by = {(r["scenario"], r["system"]): r for r in records if r.get("kind") == "bench"}
    scenarios = []
    for r in records:
        if r.get("kind") == "bench" and r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
    peers = [s for s in systems if s in PEERS]
    ratios = [(a, b) for a, b in RATIOS
              if a in systems and (b in systems or (b == "best peer" and peers))]
    own = [s for s in OWN if s in systems]
    head = ["scenario"] + [f"{s} msgs/s" for s in systems]
    head += [f"{a}/{b}" for a, b in ratios]
    head += [f"{s} p99 µs" for s in own] + [f"{s} µs CPU/msg" for s in own]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def rate(sc, s):
        if s == "best peer":
            return max((by[(sc, p)]["delivered_rate"] for p in peers if (sc, p) in by), default=0)
        return by[(sc, s)]["delivered_rate"] if (sc, s) in by else 0

    for sc in scenarios:
        row = [sc]
        for s in systems:
            r = by.get((sc, s))
            cell = _rate(r["delivered_rate"]) if r else "—"
            if r and r["client_bound"]:
                cell += " (client-bound)"
            row.append(cell)
        for a, b in ratios:
            row.append(f"{rate(sc, a) / rate(sc, b):.2f}" if rate(sc, a) and rate(sc, b) else "—")
        row += [f"{by[(sc, s)]['latency_p99_us']:.0f}" if (sc, s) in by else "—" for s in own]
        row += [f"{by[(sc, s)]['server_cpu_us_per_msg']:.2f}" if (sc, s) in by else "—" for s in own]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
