#!/usr/bin/env python3
"""Mixed pelotari / Java bully networks on 127.0.0.x, driven end to end (a hand run, scripted).

  run.sh A  [--hold S] [--after S] [--elect-on peerbox|VSP2P|P2P-Client]
        pelotari leader (`pelotari bully start --bind 127.0.0.1:3333`) + one peer of each Java
        client (peerbox 127.0.0.2, VSP2P 127.0.0.3, P2P-Client 127.0.0.4); hold; texts both ways;
        searches; `sync`; SIGKILL the leader; election by hand on one Java client.
  run.sh B  peerbox|VSP2P|P2P-Client|all [--hold S]
        the Java client leads on 127.0.0.1; two pelotari peers
        (`pelotari bully join 127.0.0.1:3333 --bind 127.0.0.{2,3}:3333`); hold; texts; the Java
        leader's time sync (if it can); SIGKILL the Java leader; both pelotari peers must name the
        higher pelotari ID.
  run.sh all [--hold S]          A, then B for each client
  run.sh stop                    kill whatever a previous (interrupted) run left (recorded pids only)

Before: fetch.sh and build.sh (README.md). The pelotari executable is $PELOTARI, else
<repo>/.venv/bin/pelotari, else `pelotari` on PATH.

Each run writes $JC_WORK/runs/<scenario>-<UTC time>/ (and the symlink runs/latest-<scenario>),
JC_WORK = ${PELOTARI_JAVACLIENTS:-$HOME/.cache/pelotari-javaclients}:
  timeline.log       every action with its exact command, wall-clock ms
  pelotari-<ip>/out.log   the node's stdout+stderr, each line prefixed by the wall clock (ms)
  <Client>-<ip>/out.log   the Java client's own log (<Client>.sh), out.ts.log the same lines with the
                          wall clock at which the driver saw them (polled every 50 ms)
  ss-*.txt           `ss -tanp` snapshots and per-process state counts
  summary.txt        what the driver extracted automatically (IDs, PeerJoined/PeerLeft, elections,
                     new leaders and how long after the kill, clock lines)
Nothing in the git tree is written. Every process started is recorded in <run>/pids and killed
at the end (also on Ctrl-C); `run.sh stop` kills what an interrupted run left.
"""
import argparse
import datetime
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.realpath(__file__))  # tools/javaclients
REPO = os.path.dirname(os.path.dirname(HERE))  # the pelotari repository
WORK = os.path.realpath(os.path.expanduser(
    os.environ.get("PELOTARI_JAVACLIENTS") or "~/.cache/pelotari-javaclients"))
RUNS = f"{WORK}/runs"
RUNSH = {c: f"{HERE}/{c}.sh" for c in ("peerbox", "VSP2P", "P2P-Client")}
PELOTARI = None  # set by main(): find_pelotari()
LIST_CMD = {"peerbox": ["peerlist", "leader"], "VSP2P": ["list"], "P2P-Client": ["list", "status"]}


def now_ms():
    return int(time.time() * 1000)


def stamp(ms=None):
    ms = now_ms() if ms is None else ms
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def find_pelotari():
    """$PELOTARI, else <repo>/.venv/bin/pelotari, else `pelotari` on PATH."""
    for cand in (os.environ.get("PELOTARI"), f"{REPO}/.venv/bin/pelotari", shutil.which("pelotari")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    sys.exit("mixed.py: no pelotari executable: set PELOTARI, or install pelotari into "
             f"{REPO}/.venv or on PATH")


def check_setup():
    """The work directory is outside the git tree (or ignored there) and build.sh has run."""
    if (WORK + "/").startswith(REPO + "/"):
        inside = subprocess.run(["git", "-C", REPO, "rev-parse", "--git-dir"], capture_output=True)
        ignored = subprocess.run(["git", "-C", REPO, "check-ignore", "-q", WORK], capture_output=True)
        if inside.returncode == 0 and ignored.returncode != 0:
            sys.exit(f"mixed.py: work directory {WORK} is inside the git tree {REPO} and not ignored "
                     "by git; set PELOTARI_JAVACLIENTS elsewhere")
    if not os.path.isfile(f"{WORK}/build/env"):
        sys.exit(f"mixed.py: not built in {WORK}: run {HERE}/fetch.sh and {HERE}/build.sh first")


class Run:
    def __init__(self, name):
        utc = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.dir = f"{RUNS}/{name}-{utc}"
        os.makedirs(self.dir)
        link = f"{RUNS}/latest-{name}"
        if os.path.islink(link):
            os.unlink(link)
        os.symlink(os.path.basename(self.dir), link)
        self.tl = open(f"{self.dir}/timeline.log", "a", buffering=1)
        self.nodes, self.javas = [], []
        self.summary = []
        self.log(f"run directory {self.dir}")
        self.log(f"load: {open('/proc/loadavg').read().strip()}  (nproc {os.cpu_count()})")
        git = ["git", "-C", REPO]
        head = subprocess.run(git + ["log", "-1", "--format=%h %cI"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--short", "--",
                                      "pelotari/bully", "pelotari/cli/bully.py", "pelotari/cli/service.py"],
                               capture_output=True, text=True).stdout.split()
        code = sorted(glob.glob(f"{REPO}/pelotari/bully/*.py")) + [
            f"{REPO}/pelotari/cli/bully.py", f"{REPO}/pelotari/cli/service.py"]
        sha = subprocess.run(["sha1sum"], input=b"".join(open(f, "rb").read() for f in code
                                                         if os.path.isfile(f)),
                             capture_output=True).stdout.decode().split()[0]
        self.log(f"pelotari: {PELOTARI}; repo {REPO} HEAD {head or '?'}; bully code sha1 {sha[:12]}; "
                 f"uncommitted bully files: {' '.join(dirty[1::2]) or 'none'}")
        clients = [line[2:].strip() for line in open(f"{WORK}/build/env") if line.startswith("# ")
                   and not line.startswith("# written")]
        self.log(f"Java clients (build/env): {'; '.join(clients)}")

    def log(self, text):
        line = f"{stamp()} {text}"
        self.tl.write(line + "\n")
        print(line, flush=True)

    def note(self, text):
        self.summary.append(text)
        self.log("SUMMARY " + text)

    def pid_record(self, pid, what):
        with open(f"{self.dir}/pids", "a") as f:
            f.write(f"{pid} {what}\n")

    # ---- snapshots
    def ss(self, tag):
        out = subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
        labels = {}
        for n in self.nodes:
            if n.proc.poll() is None:
                labels[n.proc.pid] = f"pelotari@{n.ip}"
        for j in self.javas:
            p = j.pid()
            if p:
                labels[p] = f"{j.client}@{j.ip}"
        counts = {}
        for line in out.splitlines()[1:]:
            m = re.search(r"pid=(\d+)", line)
            if not m or int(m.group(1)) not in labels:
                continue
            state = line.split()[0]
            key = labels[int(m.group(1))]
            counts.setdefault(key, {}).setdefault(state, 0)
            counts[key][state] += 1
        with open(f"{self.dir}/ss-{tag}.txt", "w") as f:
            f.write(out)
        text = "; ".join(f"{k}: " + " ".join(f"{s}={c}" for s, c in sorted(v.items()))
                         for k, v in sorted(counts.items()))
        self.log(f"ss {tag}: {text or 'no sockets'}")
        with open(f"{self.dir}/ss-counts.txt", "a") as f:
            f.write(f"{stamp()} {tag}: {text}\n")
        return counts

    def close(self):
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        try:
            for n in self.nodes:
                n.stop()
            for j in self.javas:
                j.stop()
            time.sleep(0.5)
            self.log("all stopped")
            with open(f"{self.dir}/summary.txt", "w") as f:
                f.write("\n".join(self.summary) + "\n")
        finally:
            signal.signal(signal.SIGINT, old)


class Node:
    """A pelotari process: stdin = a fifo opened read-write, stdout lines timestamped."""

    def __init__(self, run, ip, args):
        self.run, self.ip = run, ip
        self.dir = f"{run.dir}/pelotari-{ip}"
        os.makedirs(self.dir)
        fifo = f"{self.dir}/in"
        os.mkfifo(fifo)
        self.fd = os.open(fifo, os.O_RDWR)
        self.argv = [PELOTARI, "bully"] + args
        self.lines = []  # (ms, text)
        self.lock = threading.Lock()
        run.log(f"START pelotari@{ip}: {shlex.join(self.argv)}  0<>{fifo}")
        self.proc = subprocess.Popen(self.argv, stdin=self.fd, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)
        run.nodes.append(self)
        run.pid_record(self.proc.pid, f"pelotari@{ip}")
        self.out = open(f"{self.dir}/out.log", "a", buffering=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            ms = now_ms()
            text = raw.decode("utf-8", "replace").rstrip("\n")
            with self.lock:  # matched without pelotari's own "HH:MM:SS " prefix
                self.lines.append((ms, re.sub(r"^\d\d:\d\d:\d\d ", "", text)))
            self.out.write(f"{stamp(ms)} {text}\n")

    def cmd(self, line):
        self.run.log(f"CMD pelotari@{self.ip}: {line}")
        os.write(self.fd, (line + "\n").encode())

    def grep(self, pattern, since=0):
        rx = re.compile(pattern)
        with self.lock:
            return [(ms, t) for ms, t in self.lines if ms >= since and rx.search(t)]

    def wait(self, pattern, timeout, since=0):
        end = time.time() + timeout
        while time.time() < end:
            hits = self.grep(pattern, since)
            if hits:
                return hits[0]
            time.sleep(0.05)
        return None

    def kill9(self):
        ms = now_ms()
        self.run.log(f"KILL -9 pelotari@{self.ip} pid {self.proc.pid}")
        os.kill(self.proc.pid, signal.SIGKILL)
        return ms

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.run.log(f"stopped pelotari@{self.ip} (rc {self.proc.returncode})")
        try:
            os.close(self.fd)
        except OSError:
            pass


class Java:
    """A Java client through its run.sh, its instance directory inside the run directory."""

    def __init__(self, run, client, role, ip, *extra):
        self.run, self.client, self.ip = run, client, ip
        self.env = dict(os.environ, RUN_DIR=run.dir)
        self.dir = f"{run.dir}/{client}-{ip}"
        argv = [RUNSH[client], role, ip, *extra]
        run.log(f"START {client}@{ip}: RUN_DIR={run.dir} {shlex.join(argv)}")
        self.stop_tail = threading.Event()
        run.javas.append(self)  # before the start: close() stops it by its pid files even if cut short
        try:
            r = subprocess.run(argv, env=self.env, capture_output=True, text=True)
            run.log(f"  -> {r.stdout.strip()} {r.stderr.strip()}")
        finally:
            for f in ("pid", "xvfb.pid", "port80.pid"):
                if os.path.exists(f"{self.dir}/{f}"):
                    run.pid_record(open(f"{self.dir}/{f}").read().strip(), f"{client}@{ip} {f}")
        threading.Thread(target=self._tail, daemon=True).start()

    def _tail(self):
        path, pos, buf = f"{self.dir}/out.log", 0, b""
        with open(f"{self.dir}/out.ts.log", "a", buffering=1) as out:
            while True:
                stopping = self.stop_tail.is_set()
                try:
                    with open(path, "rb") as f:
                        f.seek(pos)
                        data = f.read()
                except FileNotFoundError:
                    data = b""
                if data:
                    pos += len(data)
                    buf += data
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        out.write(f"{stamp()} {line.decode('utf-8', 'replace')}\n")
                if stopping:
                    if buf:
                        out.write(f"{stamp()} {buf.decode('utf-8', 'replace')}\n")
                    return
                time.sleep(0.05)

    def pid(self):
        try:
            p = int(open(f"{self.dir}/pid").read())
            os.kill(p, 0)
            return p
        except (OSError, ValueError):
            return None

    def cmd(self, line, wait=0.0):
        self.run.log(f"CMD {self.client}@{self.ip}: {line}")
        subprocess.run([RUNSH[self.client], "cmd", self.ip, line], env=self.env)
        time.sleep(wait)

    def log_text(self):
        try:
            return open(f"{self.dir}/out.log", "rb").read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def kill9(self):
        p = self.pid()
        ms = now_ms()
        self.run.log(f"KILL -9 {self.client}@{self.ip} pid {p}")
        if p:
            os.kill(p, signal.SIGKILL)
        return ms

    def stop(self):
        r = subprocess.run([RUNSH[self.client], "stop", self.ip], env=self.env,
                           capture_output=True, text=True)
        self.run.log(f"stopped {self.client}@{self.ip}: {r.stdout.strip()}")
        time.sleep(0.2)
        self.stop_tail.set()


def lists(run, javas, nodes, tag):
    for n in nodes:
        if n.proc.poll() is None:
            n.cmd("peers")
    for j in javas:
        if j.pid():
            for c in LIST_CMD[j.client]:
                j.cmd(c, 0.4)
    run.ss(tag)


def hold(run, seconds, javas, nodes, every=60):
    run.log(f"HOLD {seconds} s")
    start = time.time()
    k = 0
    while time.time() - start < seconds:
        time.sleep(min(every, seconds - (time.time() - start)))
        k += 1
        lists(run, javas, nodes, f"hold-{k * every}s" if time.time() - start < seconds else "hold-end")


def events(run, node, since=0):
    """The summary lines for a pelotari node's own events."""
    j = node.grep(r"^peer \S+ joined", since)
    left = node.grep(r"^peer \S+ left", since)
    el = node.grep(r"^election started", since)
    nl = node.grep(r"^new leader", since)
    run.note(f"pelotari@{node.ip} since {stamp(since)}: {len(j)} PeerJoined, {len(left)} PeerLeft, "
             f"{len(el)} ElectionStarted, {len(nl)} NewLeader")
    for ms, t in left[:10]:
        run.note(f"  {stamp(ms)} {t}")
    if len(left) > 10:
        run.note(f"  ... {len(left) - 10} more PeerLeft")
    return j, left, el, nl


# ---------------------------------------------------------------------------------------------
def scenario_a(args):
    run = Run("A")
    L, PB, VS, P2 = "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"
    try:
        leader = Node(run, L, ["start", "--bind", f"{L}:3333"])
        if not leader.wait(r"^listening on", 10):
            run.note("FAIL: the pelotari leader did not start")
            return run
        pb = Java(run, "peerbox", "peer", PB, L)
        leader.wait(rf"^peer \d+@{re.escape(PB)}:\d+ joined", 25)
        vs = Java(run, "VSP2P", "peer", VS, L)
        leader.wait(rf"^peer \d+@{re.escape(VS)}:\d+ joined", 25)
        p2 = Java(run, "P2P-Client", "peer", P2, L)
        leader.wait(rf"^peer \d+@{re.escape(P2)}:\d+ joined", 25)
        javas = [pb, vs, p2]
        t_joined = now_ms()
        ids = {}
        for ms, t in leader.grep(r"^peer \d+@\S+ joined"):
            m = re.match(r"peer (\d+)@([\d.]+):(\d+) joined", t)
            ids.setdefault(m.group(2), set()).add(int(m.group(1)))
        run.note(f"IDs given at join: {ids}")
        hold(run, args.hold, javas, [leader])
        leader.cmd("stats")
        time.sleep(1)
        run.ss("after-hold")
        jl, left, el, nl = events(run, leader, t_joined)
        ids = {}
        for ms, t in leader.grep(r"^peer \d+@\S+ joined"):
            m = re.match(r"peer (\d+)@([\d.]+):(\d+) joined", t)
            ids.setdefault(m.group(2), set()).add(int(m.group(1)))
        run.note(f"IDs given (all PeerJoined): {ids}")
        idof = {ip: min(v) for ip, v in ids.items()}
        # ---- texts
        t_text = now_ms()
        for j in javas:
            if j.ip in idof:
                leader.cmd(f"text {idof[j.ip]} hello {j.client} from pelotari leader")
                time.sleep(3)
        pb.cmd("msg 25 hello pelotari from peerbox", 4)
        vs.cmd("sende 25 hallo pelotari von VSP2P", 3)
        p2.cmd("msg 25 hello pelotari from P2P-Client", 12)
        leader.cmd("stats")
        for ms, t in leader.grep(r"^text", t_text):
            run.note(f"  leader {stamp(ms)} {t}")
        # ---- searches
        t_search = now_ms()
        vs.cmd("suche 25", 3)
        p2.cmd("search 25", 8)
        for j in javas:
            if j.ip in idof:
                leader.cmd(f"search {idof[j.ip]}")
                time.sleep(3)
        leader.cmd("peers")
        leader.cmd("stats")
        time.sleep(0.5)
        for ms, t in leader.grep(r"found", t_search):
            run.note(f"  leader {stamp(ms)} {t}")
        # ---- time sync
        t_sync = now_ms()
        leader.cmd("time")
        pb.cmd("time", 0.3)
        p2.cmd("status", 0.3)
        leader.cmd("sync")
        time.sleep(10)
        leader.cmd("time")
        pb.cmd("time", 0.3)
        p2.cmd("status", 0.3)
        time.sleep(1)
        for ms, t in leader.grep(r"^(sync|clock|time|error)", t_sync):
            run.note(f"  leader {stamp(ms)} {t}")
        for ms, t in leader.grep(r"^sync done"):
            run.note(f"  all sync rounds: {stamp(ms)} {t}")
        leader.cmd("stats")
        lists(run, javas, [leader], "before-kill")
        time.sleep(2)
        # ---- kill and a hand election
        t_kill = leader.kill9()
        time.sleep(3)
        who = {"peerbox": (pb, "elect"), "VSP2P": (vs, "election"), "P2P-Client": (p2, "elect")}
        j, c = who[args.elect_on]
        j.cmd(c)
        t_el = now_ms()
        for k in range(int(args.after // 30)):
            time.sleep(30)
            lists(run, javas, [], f"after-elect-{(k + 1) * 30}s")
        run.note(f"killed leader at {stamp(t_kill)}, election by hand on {args.elect_on} at "
                 f"{stamp(t_el)}")
        finals = {"peerbox": r"(Current leader is peer \d+|No leader known.*|Received new leader: peer \d+)",
                  "VSP2P": r"(Leader ist \S+|Verbindung zum Server kann nicht hergestellt werden)",
                  "P2P-Client": r"(DRIVER: status id=\d+ connected=\S+ leader=\S+ isLeader=\S+)"}
        for j in javas:
            hits = re.findall(finals[j.client], j.log_text())
            run.note(f"  {j.client}@{j.ip} last leader line: {hits[-1] if hits else 'none'}")
    finally:
        run.close()
    return run


def scenario_b(args, client):
    run = Run(f"B-{client}")
    L, A, B = "127.0.0.1", "127.0.0.2", "127.0.0.3"
    try:
        for attempt in range(3):
            jl = Java(run, client, "leader", L)
            time.sleep(4)
            if client != "VSP2P" or "Id 1 wurde" in jl.log_text():
                break
            run.log("VSP2P leader start-up race (no 'Id 1 wurde'): restarting it")
            jl.stop()
            run.javas.remove(jl)
            time.sleep(1)
        a = Node(run, A, ["join", f"{L}:3333", "--bind", f"{A}:3333"])
        ja = a.wait(r"^joined as ID", 20)
        b = Node(run, B, ["join", f"{L}:3333", "--bind", f"{B}:3333"])
        jb = b.wait(r"^joined as ID", 20)
        run.note(f"pelotari@{A}: {ja[1] if ja else 'NOT JOINED'}")
        run.note(f"pelotari@{B}: {jb[1] if jb else 'NOT JOINED'}")
        if not (ja and jb):
            return run
        ida = int(re.search(r"ID (\d+)", ja[1]).group(1))
        idb = int(re.search(r"ID (\d+)", jb[1]).group(1))
        run.note(f"IDs: {A}={ida} {B}={idb} ({'distinct' if ida != idb else 'DUPLICATE'})")
        t0 = now_ms()
        hold(run, args.hold, [jl], [a, b])
        a.cmd("stats")
        b.cmd("stats")
        time.sleep(1)
        run.ss("after-hold")
        for n in (a, b):
            events(run, n, t0)
            for ms, t in n.grep(r"^(peer \S+ left|election|new leader|joined)", t0):
                run.note(f"  {n.ip} {stamp(ms)} {t}")
        # ---- texts
        t_text = now_ms()
        a.cmd(f"text {idb} hello {idb} from pelotari {ida}")
        time.sleep(2)
        b.cmd(f"text {ida} hello {ida} from pelotari {idb}")
        time.sleep(2)
        a.cmd(f"text 0 hello leader from pelotari {ida}")
        time.sleep(2)
        b.cmd(f"text 0 hello leader from pelotari {idb}")
        time.sleep(2)
        if client == "VSP2P":
            a.cmd(f"text 1 hello VSP2P client 1 from pelotari {ida}")
            time.sleep(2)
        for n in (a, b):
            for ms, t in n.grep(r"^(text|error)", t_text):
                run.note(f"  {n.ip} {stamp(ms)} {t}")
        # ---- time sync by the Java leader
        t_sync = now_ms()
        a.cmd("time")
        b.cmd("time")
        cmd = {"peerbox": "timesync", "VSP2P": "time", "P2P-Client": "timesync"}[client]
        jl.cmd(cmd)
        time.sleep(10)
        a.cmd("time")
        b.cmd("time")
        time.sleep(1)
        for n in (a, b):
            for ms, t in n.grep(r"^(time|clock|Clock|sync|error)", t_sync):
                run.note(f"  {n.ip} {stamp(ms)} {t}")
        lists(run, [jl], [a, b], "before-kill")
        time.sleep(2)
        # ---- kill the Java leader
        t_kill = jl.kill9()
        want = max(ida, idb)
        res = {}
        for n in (a, b):
            hit = n.wait(rf"^new leader: .*\(ID {want}\)", 30, since=t_kill)
            res[n.ip] = hit
        for n in (a, b):
            hit = res[n.ip]
            run.note(f"{n.ip}: " + (f"new leader ID {want} {hit[0] - t_kill} ms after the kill: {hit[1]}"
                                    if hit else f"NO new leader {want} within 30 s"))
            for ms, t in n.grep(r"^(election|new leader|peer \S+ left)", t_kill):
                run.note(f"  {n.ip} +{ms - t_kill} ms {t}")
        time.sleep(30)
        for n in (a, b):
            n.cmd("peers")
            n.cmd("stats")
        time.sleep(1)
        run.ss("after-election")
        for n in (a, b):
            extra = n.grep(r"^(election|new leader)", t_kill)
            run.note(f"{n.ip}: {len(extra)} election/new-leader lines in the 30 s after the kill")
    finally:
        run.close()
    return run


def stop_all():
    """SIGTERM every pid a run recorded (<run>/pids, the instances' pid files) that is still one of
    ours: its command line names java, Xvfb, port80stub.py or pelotari (a pid may have been reused)."""
    found = {}
    for pidfile in sorted(glob.glob(f"{RUNS}/*/pids")):
        for line in open(pidfile):
            pid, _, what = line.partition(" ")
            found.setdefault(pid.strip(), what.strip())
    inst_files = sorted(glob.glob(f"{RUNS}/*/*/pid") + glob.glob(f"{RUNS}/*/*/*.pid"))
    for pidfile in inst_files:
        found.setdefault(open(pidfile).read().strip(), os.path.relpath(pidfile, RUNS))
    n = 0
    for pid, what in found.items():
        try:
            cmdline = open(f"/proc/{int(pid)}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        if not re.search(r"java|Xvfb|port80stub\.py|pelotari", cmdline):
            continue
        try:
            os.kill(int(pid), signal.SIGTERM)
            print(f"killed {pid} {what} ({cmdline[:80].strip()})")
            n += 1
        except ProcessLookupError:
            pass
    for pidfile in inst_files:  # as <Client>.sh stop does: the instance is gone
        os.remove(pidfile)
    print(f"stop: {n} process(es) killed")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=["A", "B", "all", "stop"])
    ap.add_argument("client", nargs="?", default="all")
    ap.add_argument("--hold", type=float, default=300)
    ap.add_argument("--after", type=float, default=180,
                    help="A: seconds watched after the hand election (lists every 30 s)")
    ap.add_argument("--elect-on", default="peerbox", choices=["peerbox", "VSP2P", "P2P-Client"])
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    if args.scenario == "stop":
        return stop_all()
    global PELOTARI
    PELOTARI = find_pelotari()
    check_setup()
    if args.scenario == "B" and args.client not in ("all", *RUNSH):
        ap.error(f"B: client must be one of {', '.join(RUNSH)} or all")
    try:
        if args.scenario in ("A", "all"):
            scenario_a(args)
        if args.scenario in ("B", "all"):
            clients = ["peerbox", "VSP2P", "P2P-Client"] if args.client == "all" else [args.client]
            for c in clients:
                scenario_b(args, c)
    except KeyboardInterrupt:
        sys.exit("interrupted: everything this run started is stopped")


if __name__ == "__main__":
    main()
