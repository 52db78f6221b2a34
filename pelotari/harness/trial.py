"""One scenario on one system: the server, the agents, and trials at a chosen offered rate."""
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from pelotari.harness.systems import Server, System, Unavailable, agent_command, pin

CLIENT_BOUND = 0.9  # a client process busy for this share of the trial was the bottleneck
# A trial is sustained when the last message arrives within this share of the trial's duration
# (and at least MIN_LAG seconds) after publishing ends; a broker that buffers without limit
# "loses" nothing but falls behind, and that is not a rate it can keep up.
MAX_LAG = 0.1
MIN_LAG = 0.05


@dataclass(frozen=True)
class Scenario:
    """The workload shape: payload size S, subscribers N, publishers P."""

    payload: int
    subscribers: int
    publishers: int = 1

    @property
    def name(self) -> str:
        return f"S={self.payload} N={self.subscribers} P={self.publishers}"


@dataclass
class TrialResult:
    """What one trial measured."""

    offered_rate: float  # msgs/s asked of the publishers (0: as fast as possible)
    sent: int
    unique: int  # distinct messages received, summed over subscribers
    expected: int  # sent x subscribers
    duplicates: int
    reordered: int
    elapsed: float  # seconds the publishers were sending
    server_cpu: float  # CPU seconds of the server during the trial
    client_cpu: dict  # CPU seconds per client agent
    latency: dict  # p50/p90/p99/max in ns over all subscribers
    client_bound: bool = False
    notes: List[str] = field(default_factory=list)
    received_until: float = 0.0  # seconds from the trial's start to the last message received
    timeline_worst_ns: List[int] = field(default_factory=list)  # worst latency per slice
    timeline_start_ns: int = 0  # when the timeline's first slice began (CLOCK_MONOTONIC)

    @property
    def loss(self) -> float:
        return 1.0 - self.unique / self.expected if self.expected else 1.0

    @property
    def lag(self) -> float:
        """Seconds the last message arrived after publishing ended."""
        return max(0.0, self.received_until - self.elapsed)

    @property
    def sustained(self) -> bool:
        """Delivery kept up: the last message came soon after the publishers stopped."""
        return self.lag <= max(MAX_LAG * self.elapsed, MIN_LAG)

    def lossless(self, threshold: float) -> bool:
        """Loss below threshold, and delivery kept up."""
        return self.loss < threshold and self.sustained

    @property
    def ingress_rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed else 0.0

    @property
    def delivered_rate(self) -> float:
        """Distinct messages received per second, until the last one arrived."""
        window = max(self.elapsed, self.received_until)
        return self.unique / window if window else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(loss=self.loss, ingress_rate=self.ingress_rate, delivered_rate=self.delivered_rate,
                 lag=self.lag, sustained=self.sustained)
        return d


class Agent:
    """A load-generator process speaking JSON lines over stdio."""

    def __init__(self, argv: List[str], cpus: Optional[set]):
        self.proc = subprocess.Popen(argv,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=pin(cpus))
        first = self.read()
        if not first.get("ready"):
            raise Unavailable(f"load generator failed: {first.get('error', first)}")

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read().strip().splitlines()
            raise Unavailable(f"load generator exited: {err[-1] if err else 'no output'}")
        return json.loads(line)

    def send(self, command: dict) -> None:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.wait(5)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()


def placement() -> tuple:
    """(server cpus, client cpus, description): server alone on one core, clients on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None, f"one core ({cpus[0]}): server and clients share it"
    server, clients = {cpus[0]}, set(cpus[1:])
    rest = cpus[1:]
    return server, clients, (f"server on core {cpus[0]}, clients on core"
                             f"{'s' if len(rest) > 1 else ''} {','.join(map(str, rest))}")


class Session:
    """A system serving one scenario, with its agents signed on, ready for trials."""

    def __init__(self, system: System, scenario: Scenario):
        self.system, self.scenario = system, scenario
        server_cpus, client_cpus, self.placement = placement()
        self.client_cores = len(client_cpus) if client_cpus else 1
        self.server: Server = system.start(server_cpus)
        self.agents: List[Agent] = []
        try:
            agent = agent_command(system.protocol)
            extra = list(system.agent_args)
            if system.protocol != "fyrehose":
                extra += ["--system", system.protocol]
            self.sub = Agent(agent + ["sub", "--port", str(self.server.sub_port),
                                      "--subscribers", str(scenario.subscribers)] + extra,
                             client_cpus)
            self.agents.append(self.sub)
            self.pubs = []
            for k in range(scenario.publishers):
                agent = Agent(agent_command(system.protocol) + [
                    "pub", "--port", str(self.server.port), "--pub-id", str(k)] + extra, client_cpus)
                self.pubs.append(agent)
                self.agents.append(agent)
        except BaseException:
            self.close()
            raise

    def trial(self, rate: float, duration: float, idle: float = 0.5,
              timeline: float = 0.0, interval: float = 0.0) -> TrialResult:
        """Publish at `rate` msgs/s in total (0: as fast as possible) for `duration` seconds; the
        count ends `idle` seconds after the last message (a test gives a stalled machine more).
        With `timeline` (seconds), the result keeps the worst latency of each slice that long;
        with `interval` (seconds), each publisher sends at most once per interval (what is due)."""
        if not self.server.alive():
            raise Unavailable(f"{self.system.name} exited during the run")
        cpu_before = self.server.cpu_seconds()
        self.sub.send({"cmd": "measure", "max_duration": duration + idle + 10.0, "idle": idle,
                       **({"timeline": timeline} if timeline else {})})
        armed = self.sub.read()  # every subscriber is subscribed: publishing may start
        if not armed.get("armed"):
            raise Unavailable(f"load generator failed: {armed.get('error', armed)}")
        per_pub = rate / len(self.pubs) if rate else 0.0
        for agent in self.pubs:
            agent.send({"cmd": "publish", "payload_size": self.scenario.payload,
                        "duration": duration, "rate": per_pub,
                        **({"interval": interval} if interval else {})})
        pubs = [agent.read() for agent in self.pubs]
        sub = self.sub.read()
        server_cpu = self.server.cpu_seconds() - cpu_before
        sent = sum(p["sent"] for p in pubs)
        elapsed = max(p["elapsed"] for p in pubs)
        client_cpu = {"subscribers": sub["cpu"]}
        client_cpu.update({f"publisher-{p['pub_id']}": p["cpu"] for p in pubs})
        result = TrialResult(
            offered_rate=rate, sent=sent, unique=sub["unique"],
            expected=sent * self.scenario.subscribers, duplicates=sub["duplicates"],
            reordered=sub["reordered"], elapsed=elapsed, server_cpu=server_cpu,
            client_cpu=client_cpu, latency=sub["latency"], received_until=sub.get("active", 0.0),
            timeline_worst_ns=sub.get("timeline_worst_ns", []),
            timeline_start_ns=sub.get("timeline_start_ns", 0))
        busy = [name for name, cpu in client_cpu.items() if cpu >= CLIENT_BOUND * elapsed]
        if busy:
            result.client_bound = True
            result.notes.append(f"client-bound: {', '.join(busy)} busy >= {CLIENT_BOUND:.0%}")
        if sum(client_cpu.values()) >= CLIENT_BOUND * elapsed * self.client_cores:
            result.client_bound = True
            result.notes.append(f"client-bound: the client cores were >= {CLIENT_BOUND:.0%} busy")
        if not result.sustained:
            result.notes.append(f"fell behind: last message {result.lag:.2f}s after publishing ended")
        if rate and result.ingress_rate < 0.9 * rate:
            result.notes.append(f"publishers reached {result.ingress_rate:.0f} of {rate:.0f} msgs/s")
        return result

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self.server.stop()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
