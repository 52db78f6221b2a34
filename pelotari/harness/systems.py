"""The systems the bench measures, each started on 127.0.0.1 with a free port, pinned to a core."""
import hashlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import psutil

import pelotari
from pelotari.harness import source_tree
from pelotari.harness.procs import bound_port


class Unavailable(Exception):
    """The system cannot run here; the message says why (reported, and the system skipped)."""


def bench_dir() -> pathlib.Path:
    """The source tree's bench/ folder (reference backbone, baseline, peers' clients)."""
    env = os.environ.get("PELOTARI_BENCH_DIR")
    path = pathlib.Path(env) if env else source_tree() / "bench"
    if not (path / "reference").is_dir():
        raise Unavailable(f"needs the source tree's bench/ folder (not found at {path}); "
                          "set PELOTARI_BENCH_DIR")
    return path


def cache_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = pathlib.Path(base) / "pelotari" / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_c(source: pathlib.Path, extra: List[str] = ()) -> pathlib.Path:
    """Build source with the system C compiler (cached by content); raise Unavailable without one."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Unavailable("no C compiler (cc) on PATH")
    digest = hashlib.sha256(source.read_bytes() + " ".join(extra).encode()).hexdigest()[:12]
    out = cache_dir() / f"{source.stem}-{digest}"
    if not out.exists():
        res = subprocess.run([cc, "-O2", "-o", str(out) + ".tmp", str(source), *extra],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise Unavailable(f"{source.name} does not compile: {res.stderr.strip().splitlines()[-1:]}")
        os.replace(str(out) + ".tmp", out)
    return out


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A port on 127.0.0.1 free a moment ago (UDP by default), for a program that cannot be
    asked for any port; another process may take it before that program binds it, so
    System.start retries when the program says the address is in use."""
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def udp_gso_supported() -> bool:
    """Whether this kernel accepts UDP_SEGMENT (Linux >= 4.18)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.IPPROTO_UDP, 103, 1400)  # UDP_SEGMENT
        return True
    except OSError:
        return False
    finally:
        s.close()


def pin(cpus: Optional[set]) -> Optional[Callable[[], None]]:
    """A preexec_fn that pins the child to cpus."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


@dataclass
class Server:
    """A running system under test: publishers use `port`, subscribers `sub_port`."""

    name: str
    port: int
    proc: subprocess.Popen
    sub_port: int = 0

    def __post_init__(self):
        self.sub_port = self.sub_port or self.port

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class System:
    """One system: how to check for it, and how to start it on a port."""

    name: str
    protocol: str  # what the load generator speaks to it: "fyrehose", "redis", "nats", "zeromq"
    description: str
    command: Callable[..., List[str]] = field(repr=False)  # (port[, sub_port]) -> argv
    ready_text: str = "listening"
    requires: Callable[[], None] = field(default=lambda: None, repr=False)
    transport: int = socket.SOCK_DGRAM
    two_ports: bool = False  # publishers and subscribers connect to different ports
    version_command: List[str] = field(default_factory=list, repr=False)
    agent_args: List[str] = field(default_factory=list)  # for both load-generator roles
    # the port argument that has it bind any free port (read back from the kernel); None: it
    # has none, a free port is chosen for it
    any_port: Optional[int] = None

    def version(self) -> str:
        """What `version_command` prints (first line), or pelotari's own version."""
        if not self.version_command:
            return f"pelotari {pelotari.__version__}"
        try:
            out = subprocess.run(self.version_command, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        text = (out.stdout or out.stderr).strip().splitlines()
        return text[0] if text else "unknown"

    def check(self) -> Optional[str]:
        """None if the system can run here, else why not."""
        try:
            self.requires()
            self.command(1, 2) if self.two_ports else self.command(1)
            agent_command(self.protocol)
        except Unavailable as exc:
            return str(exc)
        return None

    def start(self, cpus: Optional[set] = None, timeout: float = 10.0,
              attempts: int = 5) -> Server:
        """Start it on any port (the one it bound is read back) or, where it cannot be asked for
        any, on free port(s), again on new ones while it says they were taken meanwhile; return
        once it says it is ready."""
        for _ in range(attempts):
            if self.any_port is not None:
                port = sub_port = self.any_port
            else:  # redis (0 turns TCP off), zmq_proxy (two ports): a number is chosen first
                port = free_port(self.transport)
                sub_port = free_port(self.transport) if self.two_ports else port
            argv = self.command(port, sub_port) if self.two_ports else self.command(port)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, preexec_fn=pin(cpus))
            said = []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                said.append(line)
                if self.ready_text in line:
                    if self.any_port is not None:
                        try:
                            port = sub_port = bound_port(proc.pid, self.transport, timeout=2)
                        except (TimeoutError, psutil.Error):
                            break
                    # Keep draining its output so a chatty server never blocks on a full pipe.
                    import threading

                    threading.Thread(target=proc.stdout.read, daemon=True).start()
                    return Server(self.name, port, proc, sub_port)
                if not line and proc.poll() is not None:
                    break
            proc.kill()
            proc.wait()
            proc.stdout.close()
            if "address already in use" not in "".join(said).lower():  # EADDRINUSE's text
                break
        raise Unavailable(f"{self.name} did not start (exit {proc.poll()})")


def _reference(gso: bool) -> Callable[[int], List[str]]:
    def command(port: int) -> List[str]:
        binary = compile_c(bench_dir() / "reference" / "fyrehose_ref.c")
        return [str(binary), str(port)] + (["--gso"] if gso else [])
    return command


PEER_HINT = "run: sudo bash bench/peers/install.sh"
MAX_SUBSCRIBERS = 16_384  # the load generator's largest group (fastpath.loadgen; a test holds
# the two equal), and the bench backbones' --max-subscribers
PACK = 65507  # pelotari-packed's datagram limit: loopback's MTU carries it unfragmented
# Frames per packed PUSH, on both sides: 65,507-byte packs of the smallest (16-byte) messages
# hold 2,620 frames, past the backbone's default --max-pack-frames of 1,024.
PACK_FRAMES = 8192


def _have_zmq_headers() -> bool:
    return any(os.path.exists(p) for p in ("/usr/include/zmq.h", "/usr/local/include/zmq.h"))


def peer_client() -> pathlib.Path:
    """The C load-generator client for the peer brokers (with ZeroMQ when libzmq is here)."""
    include = source_tree() / "fastpath" / "include"
    extra = [f"-I{include}"] + (["-DWITH_ZMQ", "-lzmq"] if _have_zmq_headers() else [])
    return compile_c(bench_dir() / "clients" / "peer_client.c", extra)


def agent_command(protocol: str) -> List[str]:
    """argv prefix of the load-generator agent for a protocol."""
    if protocol == "fyrehose":
        return [sys.executable, "-m", "pelotari.harness.agent"]
    if protocol == "zeromq" and not _have_zmq_headers():
        raise Unavailable(f"needs libzmq3-dev; {PEER_HINT}")
    return [str(peer_client())]


def _program(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise Unavailable(f"{name} is not installed; {PEER_HINT}")
    return path


def _redis(port: int) -> List[str]:
    return [_program("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--logfile", ""]


def _nats(port: int) -> List[str]:
    return [_program("nats-server"), "-a", "127.0.0.1", "-p", str(port)]


def _zeromq(port: int, sub_port: int) -> List[str]:
    if not _have_zmq_headers():
        raise Unavailable(f"needs libzmq3-dev; {PEER_HINT}")
    binary = compile_c(bench_dir() / "clients" / "zmq_proxy.c", ["-lzmq"])
    return [str(binary), str(port), str(sub_port)]


def _require_gso() -> None:
    if not udp_gso_supported():
        raise Unavailable("the kernel does not support UDP_SEGMENT (needs Linux >= 4.18)")


def _require_gso_and_gro() -> None:
    _require_gso()
    from pelotari.fyrehose.batchio import enable_gro

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            enable_gro(sock)
        except OSError as exc:
            raise Unavailable(exc.strerror) from None


def _pelotari(*extra: str):
    """`pelotari backbone` on 127.0.0.1. Every bench client shares one address there, so the
    per-host table limit is lifted (--max-per-address 0) and the table holds the load
    generator's largest group (the 10,000-subscriber scenarios)."""
    return lambda port: [sys.executable, "-m", "pelotari", "backbone", "--host", "127.0.0.1",
                         "--port", str(port), "--stats-interval", "3600",
                         "--max-per-address", "0", "--max-subscribers", str(MAX_SUBSCRIBERS),
                         *extra]


SYSTEMS: Dict[str, System] = {s.name: s for s in [
    System("pelotari", "fyrehose", "the pelotari backbone (Cython, recvmmsg/sendmmsg)",
           _pelotari(), any_port=0),
    System("pelotari-packed", "fyrehose",
           f"the pelotari backbone; clients use the packing extension ({PACK} B datagrams)",
           _pelotari("--max-pack-frames", str(PACK_FRAMES)), any_port=0,
           agent_args=["--pack", str(PACK), "--pack-frames", str(PACK_FRAMES)]),
    System("pelotari-gro", "fyrehose",
           "the pelotari backbone (GSO fan-out); subscribers read with UDP_GRO",
           _pelotari(), requires=_require_gso_and_gro, agent_args=["--gro"], any_port=0),
    System("pelotari-plain", "fyrehose", "the pelotari backbone without GSO (--no-gso)",
           _pelotari("--no-gso"), any_port=0),
    System("reference", "fyrehose", "minimal C backbone, sendmmsg fan-out (bench/reference)",
           _reference(gso=False), version_command=["cc", "--version"], any_port=0),
    System("reference-gso", "fyrehose", "minimal C backbone, UDP GSO fan-out (bench/reference)",
           _reference(gso=True), requires=_require_gso, version_command=["cc", "--version"],
           any_port=0),
    System("asyncio", "fyrehose", "naive asyncio backbone (bench/baseline)",
           lambda port: [sys.executable, str(bench_dir() / "baseline" / "asyncio_backbone.py"),
                         str(port)], version_command=[sys.executable, "--version"], any_port=0),
    System("redis", "redis", "Redis pub/sub, pipelined PUBLISH (Debian redis-server)", _redis,
           ready_text="Ready to accept connections", transport=socket.SOCK_STREAM,
           version_command=["redis-server", "--version"]),
    System("nats", "nats", "NATS, pipelined PUB (Debian nats-server)", _nats,
           ready_text="Server is ready", transport=socket.SOCK_STREAM,
           version_command=["nats-server", "--version"], any_port=-1),  # -1: nats' random port
    System("zeromq", "zeromq", "ZeroMQ XSUB/XPUB proxy (libzmq zmq_proxy)", _zeromq,
           transport=socket.SOCK_STREAM, two_ports=True,
           version_command=["pkg-config", "--modversion", "--print-errors", "libzmq"]),
]}
