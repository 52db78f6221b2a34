"""Bench results: one JSON-lines record per (system, scenario) run, with the environment."""
import datetime
import json
import os
import pathlib
import platform
import subprocess
from typing import Iterable, List

import pelotari

PEERS = ("redis", "nats", "zeromq")


def environment() -> dict:
    """Where and on what a run happened: commit, time, cores, kernel, Python, versions."""
    root = pathlib.Path(pelotari.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        commit = "unknown"
    cpu_model = "unknown"
    try:
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


def table(records: List[dict], systems: List[str]) -> str:
    """The side-by-side Markdown table: delivered msgs/s per system, and pelotari's ratios."""
    by = {(r["scenario"], r["system"]): r for r in records if r.get("kind") == "bench"}
    scenarios = []
    for r in records:
        if r.get("kind") == "bench" and r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
    ratio_cols = [s for s in ("reference", "reference-gso") if s in systems and s != "pelotari"]
    peers = [s for s in systems if s in PEERS]
    head = ["scenario"] + [f"{s} msgs/s" for s in systems]
    head += [f"pelotari/{s}" for s in ratio_cols]
    if peers:
        head.append("pelotari/best peer")
    head += ["pelotari p99 µs", "pelotari µs CPU/msg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sc in scenarios:
        row = [sc]
        for s in systems:
            r = by.get((sc, s))
            cell = _rate(r["delivered_rate"]) if r else "—"
            if r and r["client_bound"]:
                cell += " (client-bound)"
            row.append(cell)
        mine = by.get((sc, "pelotari"))
        for s in ratio_cols:
            other = by.get((sc, s))
            row.append(f"{mine['delivered_rate'] / other['delivered_rate']:.2f}"
                       if mine and other and other["delivered_rate"] else "—")
        if peers:
            best = max((by[(sc, p)]["delivered_rate"] for p in peers if (sc, p) in by), default=0)
            row.append(f"{mine['delivered_rate'] / best:.2f}" if mine and best else "—")
        row.append(f"{mine['latency_p99_us']:.0f}" if mine else "—")
        row.append(f"{mine['server_cpu_us_per_msg']:.2f}" if mine else "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
