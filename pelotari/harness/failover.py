"""The backbone cluster on a namespaced LAN: members, clients and kills, for `pelotari
cluster-demo` and `pelotari cluster-bench` (docs/protocols/fyrehose-cluster.md).

Every process runs in a namespace of its own on one bridge (pelotari.netlab); all of them read
the same CLOCK_MONOTONIC, so the time of a kill and the time a subscriber in another namespace
first gets the new active's messages are on one clock. The clients are agents of this module:

    python -m pelotari.harness.failover sub -b A:P,B:P,C:P --out FILE
    python -m pelotari.harness.failover pub -b A:P,B:P,C:P --rate 10000 --out FILE

(one address: a seed client of that address, e.g. the floating one). Each prints {"ready": ...}
once the backbone answers, a {"stats": ...} line a second, and on SIGTERM or stdin's end writes
what it saw to FILE (JSON: for every message its sequence, the publisher's number in its first
8 bytes, and the monotonic time it reached the application, in order) and exits.
"""
import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from fastpath.packets import MAX_SEQUENCE
from pelotari.fyrehose.cluster_backbone import nearest_position

ACTIVE = re.compile(r"active: epoch (\d+), sequencing from (\d+)")
STANDBY = re.compile(r"standby: following the active at ([\d.]+):")
STEPPED = re.compile(r"stepped down")
WRAP = MAX_SEQUENCE + 1
PAYLOAD = 64  # bytes per message: the publisher's number, then padding


# ---- the agents (one process each, inside a namespace) ---------------------------------------

def _members(text: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        host, _, port = part.strip().rpartition(":")
        out.append((host, int(port)))
    return out


def _say(record) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class _Stop:
    """SIGTERM, SIGINT or stdin's end set the event (the agent then writes what it saw)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.event.set)
        threading.Thread(target=self._stdin, args=(loop,), daemon=True).start()

    def _stdin(self, loop) -> None:
        try:
            for _ in sys.stdin:
                pass
        except (OSError, ValueError):
            pass
        loop.call_soon_threadsafe(self.event.set)


async def _connect(members, **config):
    from pelotari.fyrehose.aio import AsyncClient

    cluster = tuple(members) if len(members) > 1 else ()
    client = await AsyncClient.connect(members[0], cluster=cluster, max_queued=1 << 20,
                                       max_queued_bytes=1 << 28, **config)
    return client


async def _sub(args) -> None:
    from pelotari.fyrehose.events import Lost, Message, Resync

    loop = asyncio.get_running_loop()
    stop = _Stop(loop)
    client = await _connect(_members(args.backbone),
                            **({"keepalive_interval": args.keepalive} if args.keepalive else {}))
    await asyncio.wait_for(client.up.wait(), 60)
    _say({"ready": True, "t": time.monotonic()})
    seqs, ids, times, lost, resyncs, jumps = [], [], [], [], [], []
    # Arrivals that moved the highest SEQUENCE by more than one (a failover's first DELIVER
    # among them): when the new active's messages reached the socket, before repairs.
    received, tracker = client.datagram_received, client.core.tracker

    def datagram_received(data, addr):
        before = tracker.highest_sequence
        received(data, addr)
        after = tracker.highest_sequence
        if before is not None and after is not None and 1 < (after - before) % WRAP < 1 << 40:
            jumps.append([time.monotonic(), after])
    client.datagram_received = datagram_received
    infos = []
    if os.environ.get("PELOTARI_LAB_LOGS"):  # (debugging: every INFO and move, with times)
        on_info, move = client.core._on_info, client.core._move

        def logged_info(info, addr, now):
            infos.append([time.monotonic(), "info", list(addr), info.epoch, info.flags,
                          info.token in client.core._query_tokens, client.core.epoch])
            on_info(info, addr, now)

        def logged_move(active, epoch, now):
            infos.append([time.monotonic(), "move", list(active), epoch])
            move(active, epoch, now)
        client.core._on_info, client.core._move = logged_info, logged_move

    async def read():
        mono = time.monotonic
        async for item in client.messages():
            if type(item) is Message:
                seqs.append(item.sequence)
                ids.append(int.from_bytes(item.data[:8], "big"))
                times.append(mono())
            elif type(item) is Lost:
                lost.append([mono(), item.first, item.last, item.reason])
            elif type(item) is Resync:
                resyncs.append([mono(), item.expected, item.received])

    async def report():
        while True:
            await asyncio.sleep(1.0)
            _say({"stats": {"messages": len(seqs), "lost": len(lost), "resyncs": len(resyncs)}})

    tasks = [asyncio.create_task(read()), asyncio.create_task(report())]
    await stop.event.wait()
    stats = client.stats()
    await client.close()
    for t in tasks:
        t.cancel()
    _write(args.out, {"seqs": seqs, "ids": ids, "times": times, "lost": lost,
                      "resyncs": resyncs, "jumps": jumps, "infos": infos,
                      "stats": _plain(stats)})
    _say({"done": len(seqs)})


async def _pub(args) -> None:
    from pelotari.fyrehose.events import BackboneMoved

    loop = asyncio.get_running_loop()
    stop = _Stop(loop)
    client = await _connect(_members(args.backbone), journal_size=1 << 16,
                            **({"keepalive_interval": args.keepalive} if args.keepalive else {}))
    await asyncio.wait_for(client.up.wait(), 60)
    _say({"ready": True, "t": time.monotonic()})
    confirmed, failed, moves = {}, 0, []
    sent = 0
    pad = bytes(PAYLOAD - 8)
    mono = time.monotonic

    def done(number, fut):
        nonlocal failed
        if fut.cancelled() or fut.exception() is not None:
            failed += 1
        else:
            confirmed[number] = (fut.result(), mono())

    # BackboneMoved comes through the client's event hook; keep the times.
    handle = client._process_events

    def events(evs):
        evs = list(evs)
        for ev in evs:
            if isinstance(ev, BackboneMoved):
                moves.append([mono(), list(ev.new), ev.epoch, ev.resent])
        return handle(evs)
    client._process_events = events

    async def report():
        while True:
            await asyncio.sleep(1.0)
            _say({"stats": {"sent": sent, "confirmed": len(confirmed), "failed": failed}})

    reporter = asyncio.create_task(report())
    start = mono()
    tick = 0.002
    while not stop.event.is_set():
        due = int((mono() - start) * args.rate) - sent
        if due > 0:
            datas = [(sent + k).to_bytes(8, "big") + pad for k in range(min(due, 512))]
            futs = client._command(lambda now, d=datas: client._futures_for(
                client.core.publish_many(d, now), loop.create_future))
            for k, fut in enumerate(futs):
                if fut is not None:
                    fut.add_done_callback(lambda f, n=sent + k: done(n, f))
            sent += len(datas)
        try:
            await asyncio.wait_for(stop.event.wait(), tick)
        except asyncio.TimeoutError:
            pass
    await asyncio.sleep(0.5)  # the last confirmations
    stats = client.stats()
    await client.close()
    reporter.cancel()
    numbers = sorted(confirmed)
    _write(args.out, {"sent": sent, "failed": failed, "moves": moves,
                      "ids": numbers, "seqs": [confirmed[n][0] for n in numbers],
                      "times": [confirmed[n][1] for n in numbers], "stats": _plain(stats)})
    _say({"done": len(numbers)})


def _plain(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if isinstance(v, (int, float, str))}


def _write(path: str, record: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def agent_main(argv=None) -> None:
    """`python -m pelotari.harness.failover sub|pub ...` (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m pelotari.harness.failover")
    parser.add_argument("role", choices=["sub", "pub"])
    parser.add_argument("-b", "--backbone", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--keepalive", type=float, default=0.0)
    args = parser.parse_args(argv)
    asyncio.run(_sub(args) if args.role == "sub" else _pub(args))


# ---- the lab (the driver's side) --------------------------------------------------------------

@dataclass
class Line:
    t: float
    text: str


class Proc:
    """A process in a namespace whose stderr (and stdout) lines are read by threads, each line
    with the monotonic time it was read."""

    def __init__(self, popen: subprocess.Popen, name: str):
        self.popen = popen
        self.name = name
        self.err: list[Line] = []
        self.out: list[Line] = []
        self.changed = threading.Condition()
        for stream, into in ((popen.stderr, self.err), (popen.stdout, self.out)):
            if stream is not None:
                threading.Thread(target=self._read, args=(stream, into), daemon=True).start()

    def _read(self, stream, into) -> None:
        for raw in stream:
            line = Line(time.monotonic(), raw.decode(errors="replace").rstrip("\n"))
            with self.changed:
                into.append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def json_lines(self) -> list[dict]:
        out = []
        for line in list(self.out):
            try:
                out.append(json.loads(line.text))
            except ValueError:
                pass
        return out


@dataclass
class Member:
    index: int
    host: object  # netlab.Host
    proc: Optional[Proc] = None
    role: str = "down"
    since: float = 0.0
    epoch: int = 0
    first: int = 0
    events: list = field(default_factory=list)


class ClusterLab:
    """N backbone members and client hosts on a namespaced LAN (root only); close() removes
    everything. `on_line(member, line)` sees every line a member prints."""

    def __init__(self, lan, members: int = 3, clients: int = 4, port: int = 2323,
                 workdir: str = "", floating: bool = False, on_line=None):
        self.lan = lan
        self.port = port
        self.workdir = workdir
        self.on_line = on_line or (lambda member, line: None)
        self.members = [Member(i, lan.add_host(f"b{i + 1}")) for i in range(members)]
        self.clients = [lan.add_host(f"c{i + 1}") for i in range(clients)]
        self.key = os.path.join(workdir, "cluster.key")
        with open(self.key, "wb") as f:
            f.write(os.urandom(32))
        self.floating = None
        if floating:  # an address of the LAN's subnet no host has
            self.floating = f"{lan.subnet}.100"
        self._lock = threading.Condition()
        self.history: list[Proc] = []  # every member process started

    def save_logs(self) -> None:
        """Every member process's stderr and stdout lines, to workdir/member-N.log."""
        for n, p in enumerate(self.history):
            with open(os.path.join(self.workdir, f"member-{n}-{p.name}.log"), "w") as f:
                for line in sorted(p.err + p.out, key=lambda line: line.t):
                    f.write(f"{line.t:.3f} {line.text}\n")

    @property
    def addresses(self) -> list[str]:
        return [m.host.address for m in self.members]

    def backbone_arg(self) -> str:
        """-b for a client that follows the cluster (every member) or the floating address."""
        if self.floating:
            return f"{self.floating}:{self.port}"
        return ",".join(f"{a}:{self.port}" for a in self.addresses)

    def start_member(self, i: int) -> Member:
        """Start member i (again); its role lines update the member as they come."""
        m = self.members[i]
        peers = ",".join(a for a in self.addresses if a != m.host.address)
        argv = [sys.executable, "-m", "pelotari", "backbone", "--host", m.host.address,
                "--port", str(self.port), "--cluster", "lab", "--peers", peers,
                "--cluster-key-file", self.key,
                *(["--stats-interval", "0.5", "--json-stats"] if os.environ.get(
                    "PELOTARI_LAB_LOGS") else ["--stats-interval", "3600"]),
                "--state-dir", os.path.join(self.workdir, f"state{i}")]
        if self.floating:
            argv += ["--floating-address", f"{self.floating}/24",
                     "--floating-dev", m.host.interface]
        popen = self.lan.spawn(m.host, argv, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        m.proc = Proc(popen, f"b{i + 1}")
        self.history.append(m.proc)
        m.role, m.since = "starting", time.monotonic()
        threading.Thread(target=self._follow, args=(m, m.proc), daemon=True).start()
        return m

    def _follow(self, m: Member, proc: Proc) -> None:
        seen = 0
        while True:
            with proc.changed:
                while len(proc.err) == seen and proc.alive():
                    proc.changed.wait(0.5)
                lines = proc.err[seen:]
                seen += len(lines)
                ended = not lines and not proc.alive()
            for line in lines:
                self._role(m, proc, line)
                self.on_line(m, line)
            if ended:
                return

    def _role(self, m: Member, proc: Proc, line: Line) -> None:
        if m.proc is not proc:
            return
        with self._lock:
            a = ACTIVE.search(line.text)
            if a:
                m.role, m.since, m.epoch, m.first = "active", line.t, *map(int, a.groups())
                m.events.append(("active", line.t, m.epoch, m.first))
            elif STANDBY.search(line.text):
                m.role, m.since = "standby", line.t
            elif STEPPED.search(line.text):
                m.role, m.since = "stepped down", line.t
            self._lock.notify_all()

    def wait(self, predicate, timeout: float, interrupted=lambda: None) -> bool:
        """Wait until predicate() (checked at every member line, and every 0.1 s)."""
        end = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                interrupted()
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.1))
        return True

    def active(self) -> Optional[Member]:
        """The one live member whose last word was `active`, if exactly one."""
        found = [m for m in self.members if m.proc and m.proc.alive() and m.role == "active"]
        return found[0] if len(found) == 1 else None

    def kill(self, m: Member) -> float:
        """SIGKILL member m's process; the monotonic time just before."""
        t = time.monotonic()
        os.killpg(m.proc.popen.pid, signal.SIGKILL)
        m.proc.popen.wait()
        with self._lock:
            m.role, m.since = "down", t
            self._lock.notify_all()
        return t

    def start_agent(self, host, role: str, out: str, rate: float = 0.0,
                    keepalive: float = 0.0) -> Proc:
        """A sub or pub agent on a client host, following the cluster (or the floating address)."""
        argv = [sys.executable, "-m", "pelotari.harness.failover", role, "-b",
                self.backbone_arg(), "--out", out]
        if rate:
            argv += ["--rate", str(rate)]
        if keepalive:
            argv += ["--keepalive", str(keepalive)]
        popen = self.lan.spawn(host, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        return Proc(popen, f"{role}@{host.name}")


def wait_ready(procs: list[Proc], timeout: float, interrupted=lambda: None) -> bool:
    """Until every agent printed its ready line (or one of them died)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        interrupted()
        if all(any("ready" in r for r in p.json_lines()) for p in procs):
            return True
        if any(not p.alive() for p in procs):
            return False
        time.sleep(0.05)
    return False


def stop_agent(p: Proc, timeout: float = 30.0) -> None:
    """SIGTERM an agent (it writes its file) and wait for it."""
    if p.alive():
        try:
            os.killpg(p.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        p.popen.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.popen.pid, signal.SIGKILL)
        p.popen.wait()


# ---- what the files say ----------------------------------------------------------------------

def first_at_or_after(times: list[float], positions: list[int], start: int,
                      after: float) -> Optional[float]:
    """The first time ≥ `after` of a message at position ≥ start."""
    for t, p in zip(times, positions):
        if t >= after and p >= start:
            return t
    return None


def judge(pub: dict, subs: list[dict]) -> dict:
    """The counts the issue asks for: confirmed but never delivered (per subscriber, summed),
    sequences naming two messages, duplicates delivered, re-sends."""
    confirmed = set(pub["ids"])
    missing = 0
    duplicates = 0
    named: dict[int, int] = {}
    two_names = 0
    for s in subs:
        got = set(s["ids"])
        missing += len(confirmed - got)
        duplicates += len(s["ids"]) - len(got)
        for seq, n in zip(s["seqs"], s["ids"]):
            if named.setdefault(seq, n) != n:
                two_names += 1
    for seq, n in zip(pub["seqs"], pub["ids"]):
        if named.setdefault(seq, n) != n:
            two_names += 1
    return {"confirmed": len(confirmed), "sent": pub["sent"], "failed": pub["failed"],
            "confirmed_not_delivered": missing, "sequences_two_messages": two_names,
            "duplicates_delivered": duplicates,
            "resent": sum(m[3] for m in pub["moves"]), "moves": len(pub["moves"]),
            "lost_ranges": sum(len(s["lost"]) for s in subs),
            "resyncs": sum(len(s["resyncs"]) for s in subs)}


if __name__ == "__main__":
    agent_main()


# ---- the run: kills, restarts, records ---------------------------------------------------------

FAULTS = {
    "kill": "SIGKILL the active",
    "cut": "cut the active's link (the veth's bridge end down), heal it later",
    "standby": "SIGKILL a standby (the active goes on: no failover)",
    "double": "SIGKILL the active, then the new one as soon as it sequences",
    "loss": "SIGKILL the active, with 5 % of UDP between the backbones dropped",
}


def run(lan, workdir: str, kills: int = 20, rate: float = 10000.0, subscribers: int = 3,
        floating: bool = False, keepalive: float = 0.0, settle: float = 2.0,
        say=lambda text: None, interrupted=lambda: None, on_line=None, fault: str = "kill",
        members: int = 3) -> tuple[list[dict], dict]:
    """Make `fault` (FAULTS) `kills` times under `rate` messages/s; one record per fault and a
    summary (judge's counts, medians and worst cases)."""
    def check_wait(pred, timeout, what):
        if not lab.wait(pred, timeout, interrupted):
            raise RuntimeError(f"gave up waiting {timeout:.0f} s for {what}")

    def pause(seconds):
        deadline = time.monotonic() + seconds
        check_wait(lambda: time.monotonic() >= deadline, seconds + 1, "a pause")

    def new_active(exclude, since):
        """A member other than those excluded that became active after `since`."""
        for m in lab.members:
            if m not in exclude and m.proc and m.proc.alive() and m.role == "active" and \
                    m.since >= since:
                return m
        return None

    if fault not in FAULTS:
        raise ValueError(f"fault is one of {', '.join(FAULTS)}")
    lab = ClusterLab(lan, members=members, clients=subscribers + 1, workdir=workdir,
                     floating=floating, on_line=on_line)
    names = {m.host.address: f"b{m.index + 1}" for m in lab.members}
    say(f"{len(lab.members)} backbones ({', '.join(lab.addresses)}), "
        f"{subscribers} subscribers and a publisher on a namespaced LAN"
        + (f"; clients use the floating address {lab.floating} only" if floating else ""))
    if fault == "loss":
        for m in lab.members:
            lan.loss_from(m.host, 5, [o for o in lab.addresses if o != m.host.address])
        say("5 % of UDP between the backbones dropped (nftables, at each backbone)")
    for i in range(len(lab.members)):
        lab.start_member(i)
    check_wait(lambda: lab.active() is not None
               and sum(m.role == "standby" for m in lab.members) == len(lab.members) - 1,
               90, "an active and its standbys")
    act = lab.active()
    say(f"b{act.index + 1} is active (epoch {act.epoch}), the others stand by")
    files = {}
    agents = []
    for k in range(subscribers):
        files[f"sub{k}"] = os.path.join(workdir, f"sub{k}.json")
        agents.append(lab.start_agent(lab.clients[k], "sub", files[f"sub{k}"],
                                      keepalive=keepalive))
    if not wait_ready(agents, 60, interrupted):
        raise RuntimeError("a subscriber did not sign on: "
                           + "; ".join(line.text for a in agents for line in a.err[-3:]))
    files["pub"] = os.path.join(workdir, "pub.json")
    pub = lab.start_agent(lab.clients[subscribers], "pub", files["pub"], rate=rate,
                          keepalive=keepalive)
    if not wait_ready([pub], 60, interrupted):
        raise RuntimeError("the publisher did not sign on: "
                           + "; ".join(line.text for line in pub.err[-3:]))
    say(f"publishing {rate:g} messages/s")
    log = []
    try:
        for k in range(kills):
            pause(settle)
            old = lab.active()
            if old is None:
                raise RuntimeError("no single active before a fault")
            entry = {"fault": k + 1, "old": names[old.host.address]}
            if fault == "standby":
                victim = next(m for m in lab.members if m is not old and m.role == "standby")
                say(f"fault {k + 1}/{kills}: SIGKILL b{victim.index + 1}, a standby")
                t0 = lab.kill(victim)
                pause(settle / 2)
                same = lab.active() is old and old.epoch == entry.setdefault("epoch", old.epoch)
                say(f"  b{old.index + 1} still active in epoch {old.epoch}" if same else
                    "  the active changed!")
                entry.update(t_kill=t0, new=names[old.host.address], first=None,
                             new_active_s=None, failover=not same)
                lab.start_member(victim.index)
                check_wait(lambda: victim.role == "standby", 60, "the standby to come back")
                log.append(entry)
                continue
            if fault == "cut":
                say(f"fault {k + 1}/{kills}: b{old.index + 1}'s link cut (it lives on, alone)")
                t0 = time.monotonic()
                lan.set_link(old.host, False)
            else:
                say(f"fault {k + 1}/{kills}: SIGKILL b{old.index + 1}, the active")
                t0 = lab.kill(old)
            check_wait(lambda: new_active([old], t0) is not None, 60, "a new active")
            new = new_active([old], t0)
            gone = [old]
            if fault == "double":
                say(f"  b{new.index + 1} took over {1000 * (new.since - t0):.0f} ms later: "
                    "SIGKILL it too")
                t0 = lab.kill(new)
                gone.append(new)
                check_wait(lambda: new_active(gone, t0) is not None, 60, "a third active")
                new = new_active(gone, t0)
            entry.update(t_kill=t0, new=names[new.host.address], epoch=new.epoch,
                         first=new.first, new_active_s=new.since - t0)
            say(f"  b{new.index + 1} took over {1000 * (new.since - t0):.0f} ms after the "
                f"{'cut' if fault == 'cut' else 'kill'} (epoch {new.epoch}, sequencing from "
                f"{new.first})")
            if fault == "cut":
                # The cut-off active stops by itself (its lease): before the new one began?
                check_wait(lambda: old.role != "active", 60, "the cut-off active to stop")
                entry["old_stopped_s"] = old.since - t0
                entry["overlap_s"] = old.since - new.since  # < 0: never two at once
                say(f"  b{old.index + 1} stopped {1000 * (old.since - t0):.0f} ms after the "
                    f"cut, {1000 * (new.since - old.since):.0f} ms before b{new.index + 1} "
                    "began")
                pause(settle / 2)
                lan.set_link(old.host, True)
                healed = time.monotonic()
                check_wait(lambda: old.role == "standby", 60, "the healed one to stand by")
                pause(settle / 2)
                entry["second_outage"] = any(m.since > healed and m.role == "active"
                                             for m in lab.members)
                say(f"  link healed: b{old.index + 1} stands by, "
                    + ("a SECOND OUTAGE" if entry["second_outage"] else "no second outage"))
            else:
                pause(settle / 2)
                for m in gone:
                    lab.start_member(m.index)
                check_wait(lambda: all(m.role == "standby" for m in gone), 60,
                           "the killed to stand by")
                say(f"  {' and '.join(f'b{m.index + 1}' for m in gone)} restarted: standing "
                    f"by, following b{new.index + 1}")
            log.append(entry)
    finally:
        if os.environ.get("PELOTARI_LAB_LOGS"):
            lab.save_logs()
        stop_agent(pub)
        time.sleep(1.0)  # the subscribers' last repairs
        for a in agents:
            stop_agent(a)
    data = {}
    for name, path in files.items():
        try:
            with open(path) as f:
                data[name] = json.load(f)
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"the {name} agent wrote no results ({exc}): "
                               + "; ".join(line.text for p in [pub, *agents]
                                           for line in p.err[-3:])) from None
    subs = [data[f"sub{k}"] for k in range(subscribers)]
    clients = "floating" if floating else "pelotari"
    records = []
    ref = subs[0]["seqs"][0] if subs[0]["seqs"] else 0
    pos = {name: [nearest_position(q, ref) for q in d["seqs"]] for name, d in data.items()}
    for e in log:
        t_kill = e.pop("t_kill")
        each, arrived = [], []
        confirm = None
        if e["first"] is not None:
            start = nearest_position(e["first"], ref)
            for k, s in enumerate(subs):
                t = first_at_or_after(s["times"], pos[f"sub{k}"], start, t_kill)
                each.append(None if t is None else t - t_kill)
                jumps = [nearest_position(j[1], ref) for j in s["jumps"]]
                t = first_at_or_after([j[0] for j in s["jumps"]], jumps, start, t_kill)
                arrived.append(None if t is None else t - t_kill)
            t = first_at_or_after(data["pub"]["times"], pos["pub"], start, t_kill)
            confirm = None if t is None else t - t_kill
        # The longest the publisher went unconfirmed around the fault (a standby's death
        # should not show; a failover's is about confirm_s).
        times = [t for t in data["pub"]["times"] if t_kill - 0.5 <= t <= t_kill + 2.0]
        pause_s = max((b - a for a, b in zip(times, times[1:])), default=None)
        e.pop("first", None)
        records.append({"kind": "fyrehose-failover", "clients": clients, "fault": fault,
                        "kill": e.pop("fault"), "rate": rate, "subscribers": subscribers,
                        "members": len(lab.members),
                        "arrive_s": None if not arrived or None in arrived else max(arrived),
                        "arrive_each_s": arrived,
                        "deliver_s": None if not each or None in each else max(each),
                        "deliver_each_s": each, "confirm_s": confirm,
                        "publisher_pause_s": pause_s, **e})
    summary = {"kind": "fyrehose-failover-run", "clients": clients, "fault": fault, "rate": rate,
               "subscribers": subscribers, "members": len(lab.members), "kills": len(log),
               **judge(data["pub"], subs)}
    for key in ("new_active_s", "arrive_s", "deliver_s", "confirm_s", "publisher_pause_s"):
        values = sorted(r[key] for r in records if r.get(key) is not None)
        summary[f"{key}_median"] = values[len(values) // 2] if values else None
        summary[f"{key}_worst"] = values[-1] if values else None
        summary[f"{key}_missing"] = sum(r.get(key) is None for r in records)
    if fault == "cut":
        summary["overlap_worst_s"] = max(r["overlap_s"] for r in records)
        summary["second_outages"] = sum(r["second_outage"] for r in records)
    if fault == "standby":
        summary["failovers"] = sum(r["failover"] for r in records)
    return records, summary
