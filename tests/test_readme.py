"""Every ```sh block of README.md runs here as a person pastes it into a terminal, and must work
every time; a block that cannot run in a test is in EXCLUDED, with why. The blocks are found in
the README itself, so a new example is run (or fails until it is excluded with a reason).

How a block runs: its text, verbatim, is the command string of an interactive bash (`bash -i -e
-c TEXT`, no rc files: job control as in a terminal, so `kill %1` and `$!` work and a background
job that reads the terminal is stopped, as it would be there; -e: the first failing line fails
the block) whose terminal is a pty and whose PATH starts with the venv's bin (`pelotari` is
.venv/bin/pelotari), in a fresh folder holding a `.venv` link. Each block gets a network
namespace of its own with only `lo` (root: `ip netns`), so the README's fixed ports (2323, 9466,
4002, 21452) are the real ones and collide with no other test or block. When bash has run the
last line, the test waits (by the output, to the block's deadline) for what EXPECT names (a background
subscriber's last message, say), then stops every process group still in the namespace (the
servers a block leaves running, as the README does) and removes the namespace.

A block may assume what the README around it has set up: CONTEXT runs that first, in the same
namespace, as "another terminal" (a backbone left running, a swarm node); PREPARE makes files it
reads (a capture). Lines of an excluded block that can run alone are in ALONE, run the same way.
"""
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from itertools import count
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # the venv's bin: its `pelotari` is .venv/bin/pelotari
# Seconds a block may take: DEADLINE, and PER_LINE more for each line (the craft block's seven
# commands, each importing scapy, take 13 s here under load: 200 s is 15 times that); a stop
# takes at most 30 s more. Met at once when all goes well: only a failure waits them out.
DEADLINE, PER_LINE = 60.0, 20.0

MINUTES = "takes minutes or hours (a benchmark, simulation or fuzzing); its own tests run it small"
TERMINALS = ("{} terminals, each a command that runs until Ctrl-C (and reads commands typed into "
             "it): not one paste; tests/{} starts each")
# Blocks that cannot run in a test, by their first command (comments dropped), and why.
EXCLUDED = {
    "bash tools/run demo": "sets up .venv and runs the whole test suite, which runs this test "
    "(CI runs `bash tools/run test`; tests/test_cli.py runs the demo)",
    "pelotari backbone": "three terminals, each running until Ctrl-C; the block after it runs "
    "the same three commands in one terminal, and tests/test_cli.py each",
    "pelotari prototari": "needs a private LAN interface (it broadcasts on the host's LAN) and runs "
    "until Ctrl-C; tests/test_prototari_lan.py runs nodes on a namespaced LAN",
    "pelotari bully start --bind 127.0.0.1:3333": TERMINALS.format("four", "test_bully_node.py"),
    "head -c 32 /dev/urandom > prod.key":
    "three hosts, each running until Ctrl-C; tests/test_cluster_backbone.py runs three members "
    "on 127.0.0.x, kills the active and starts it again",
    "pelotari potato node --name A --listen 127.0.0.1:4001": TERMINALS.format("three", "test_potato_node.py"),
    "pelotari potato node --name A --listen 127.0.0.1:4001 --http 8080":
    TERMINALS.format("three", "test_potato_browser.py") + " with pages in headless chromium",
    "pelotari swarm keygen -o swarm.key": TERMINALS.format("three", "test_swarm_node.py")
    + " (keygen runs alone: ALONE)",
    "pelotari swarm simulate --nodes 10000 -o swarm.jsonl": MINUTES,
    "sudo .venv/bin/python bench/attack/replay.py": "needs sudo and ~40 s; each attack it replays "
    "is a test of its own (tests/test_hostile_fyrehose.py, tests/test_prototari_attack.py)",
    "bash tools/run fuzz list": MINUTES + " (tests/test_fuzz.py); and it runs from the repository, "
    "not a fresh folder",
    "pelotari bench --systems pelotari,pelotari-plain,reference,reference-gso --rounds 3": MINUTES,
    "pelotari bench --latency-rates 10000,50000,200000,500000,1000000":
    MINUTES + " (tests/test_bench_interrupts.py runs --latency-rates; tests/test_loadgen.py "
    "a group of 1,500 subscribers)",
    "pelotari bench --list": MINUTES + " (`--list` runs alone: ALONE)",
    "pelotari trend results/": "needs bench results; tests/test_trend.py runs trend on some",
    "mkdir -p results": MINUTES,
    "sudo .venv/bin/pelotari inspect -i lo -f \"udp port 2323 and inbound\" -w session.pcap":
    "a live capture as root (sudo) until Ctrl-C in one terminal while the next line runs in "
    "another; tests/test_scapy_tools.py captures and inspects; the pub/sub line runs alone (ALONE)",
    "pelotari craft swarm ping -F token=random --key-file swarm.key --send 127.0.0.1:21452 --wait 1":
    "its live capture runs as root until Ctrl-C (tests/test_scapy_tools.py); the other lines run "
    "alone (ALONE)",
}

BACKBONE = "pelotari backbone 2> backbone.log & pelotari wait $!"  # the README's, left running
SWARM_NODE = ("pelotari swarm keygen -o swarm.key\n"
              "pelotari swarm node --listen 127.0.0.1:21452 --key-file swarm.key & pelotari wait $!")
# Lines of excluded blocks that run alone, each with the CONTEXT it needs (or None).
ALONE = {
    "pelotari swarm keygen -o swarm.key": None,
    "pelotari bench --list": None,
    "mkdir -p results": None,
    "pelotari sub --count 3 & pelotari wait $! && pelotari pub a b c": BACKBONE,
    "pelotari craft swarm ping -F token=random --key-file swarm.key --send 127.0.0.1:21452 --wait 1":
    SWARM_NODE,
    "pelotari craft swarm connect -F attempt=3 -F ack=1 -F token=7 -F echo=9 --hexdump": None,
    "pelotari craft swarm connections -F entries=10.0.0.1:21452,vague:[2001:db8::1]:21452 "
    "--hexdump": None,
}
# What a block assumes the README around it has left running (run first, in another shell).
CONTEXT = {}


POTATO = "pelotari potato node --name B --transport tcp --listen 127.0.0.1:4002 < /dev/null &"
# Files a block reads that the README has the reader make elsewhere.
PREPARE = {}
# What must show (stream, text) before the block counts as done: its result, or the last line of
# a background job it started; the test waits for it after bash has run the block's last line.
EXPECT = {
    "pelotari backbone 2> backbone.log & pelotari wait $!": [
        ("stdout", "\thello\n"), ("stdout", "\tworld\n"), ("stderr", "received 2 messages")],
    "pelotari backbone --metrics 9466 &": [
        ("stdout", "pelotari_fyrehose_pushes_total 0.0"), ("stdout", '"entries": []')],
    "pelotari backbone & pelotari wait $!": [
        ("stdout", "answer from 127.0.0.1:2323: fyrehose KEEPALIVE-ACK")],
    POTATO: [("stderr", "127.0.0.1:4002 is 'B'"), ("stdout", "message direct from A (1 hop): hello"),
             ("stderr", "wrote 2 packets to mesh.pcap"), ("stdout", "potato hello 'A'"),
             ("stderr", "2 packets: HELLO 1, direct 1")],
    "pelotari sub --count 3 & pelotari wait $! && pelotari pub a b c": [
        ("stdout", "\ta\n"), ("stdout", "\tc\n"), ("stderr", "received 3 messages")],
    "pelotari craft swarm ping -F token=random --key-file swarm.key --send 127.0.0.1:21452 --wait 1":
    [("stdout", "swarm Reset attempt=0 mac ok")],
}


def command(line: str) -> str:
    """A shell line as the tables name it: its comment dropped, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"\s+#.*$", "", line)).strip()


def readme_blocks() -> list[tuple[str, list[str], list[str]]]:
    """Every ```sh (bash, shell, console) block: (text, raw lines, commands), where a command
    is a line (continuations joined) without its comment."""
    found = []
    for text in re.findall(r"^```(?:sh|bash|shell|console)[ \t]*\n(.*?)^```", README.read_text(),
                           re.M | re.S):
        raw, commands, pending = [], [], ""
        for line in text.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            line, pending = pending + line, ""
            if command(line) and not command(line).startswith("#"):
                raw.append(line)
                commands.append(command(line))
        found.append((text, raw, commands))
    return found


BLOCKS = {commands[0]: (text, raw) for text, raw, commands in readme_blocks() if commands}
RUN = sorted(set(BLOCKS) - set(EXCLUDED))


def test_every_block_is_run_or_excluded_with_a_reason():
    blocks = readme_blocks()
    assert len(blocks) >= 15, "the README's ```sh blocks were not found"
    firsts = [commands[0] if commands else None for _, _, commands in blocks]
    assert None not in firsts, "a ```sh block without a command"
    assert len(set(firsts)) == len(firsts), "two blocks start with the same command"
    assert not set(EXCLUDED) - set(BLOCKS), f"excluded, but no block starts so: " \
        f"{set(EXCLUDED) - set(BLOCKS)}"
    assert all(why.strip() for why in EXCLUDED.values())
    excluded_lines = {c for text, raw, commands in blocks if commands[0] in EXCLUDED
                      for c in commands}
    assert not set(ALONE) - excluded_lines, f"ALONE names no line of an excluded block: " \
        f"{set(ALONE) - excluded_lines}"
    named = set(CONTEXT) | set(PREPARE) | set(EXPECT)
    assert not named - set(RUN) - set(ALONE), f"no such block or line: {named - set(RUN) - set(ALONE)}"
    assert {"pelotari backbone --metrics 9466 &", "pelotari backbone & pelotari wait $!"} <= set(RUN)


def namespaces_missing() -> str:
    """Why a block cannot have a network namespace of its own here ('' if it can)."""
    if os.geteuid() != 0:
        return "each block runs in a network namespace of its own, which needs root"
    missing = [tool for tool in ("ip", "setsid") if not shutil.which(tool)]
    return f"{' and '.join(missing)} not installed" if missing else ""


_numbers = count()


class Namespace:
    """A network namespace with only `lo` up; stop() ends every process in it (SIGTERM to each
    one's process group, SIGKILL what is left after 20 s) and removes it."""

    def __init__(self, folder: Path):
        self.name = f"ptreadme{os.getpid()}x{next(_numbers)}"
        self.folder = folder
        self.env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        try:
            subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True,
                           capture_output=True)
        except BaseException:
            self.remove()
            raise

    def context(self, script: str) -> None:
        """Run script (its servers stay up, as in another terminal); its output in context.log."""
        with open(self.folder / "context.log", "ab") as log:
            done = subprocess.run(["ip", "netns", "exec", self.name, "bash", "-e", "-c", script],
                                  cwd=self.folder, env=self.env, stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  timeout=DEADLINE + PER_LINE * script.count("\n"))
        assert done.returncode == 0, (self.folder / "context.log").read_text()

    def paste(self, text: str) -> "Terminal":
        return Terminal(self, text)

    def pids(self) -> list[int]:
        res = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True)
        return [int(p) for p in res.stdout.split()]

    def stop(self) -> None:
        import psutil

        processes = []
        for pid in self.pids():
            try:
                processes.append(psutil.Process(pid))
                group = os.getpgid(pid)
                if group == os.getpgrp():  # never this test's own group
                    os.kill(pid, signal.SIGTERM)
                else:
                    os.killpg(group, signal.SIGTERM)
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass
        _, alive = psutil.wait_procs(processes, timeout=20)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
        finally:
            self.remove()


class Terminal:
    """`text` pasted into an interactive bash on a pty of its own (its controlling terminal),
    in the namespace; stdout and stderr are read as they come."""

    def __init__(self, ns: Namespace, text: str):
        self.out = {"stdout": "", "stderr": ""}
        self.open = 2
        self.cond = threading.Condition()
        self.master, slave = pty.openpty()  # kept open: closing it would hang the terminal up
        try:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", ns.name, "setsid", "--ctty",
                 "bash", "--norc", "--noprofile", "-i", "-e", "-c", text],
                cwd=ns.folder, env=ns.env, stdin=slave, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
        finally:
            os.close(slave)
        self.readers = [threading.Thread(target=self._read, args=(name, stream), daemon=True)
                        for name, stream in (("stdout", self.proc.stdout),
                                             ("stderr", self.proc.stderr))]
        for r in self.readers:
            r.start()

    def _read(self, name, stream):
        for chunk in iter(lambda: stream.read1(65536), b""):
            with self.cond:
                self.out[name] += chunk.decode("utf-8", "replace")
                self.cond.notify_all()
        with self.cond:
            self.open -= 1
            self.cond.notify_all()

    def wait_for(self, expected, deadline) -> bool:
        """Until every (stream, text) has shown, or nothing more can (all writers gone)."""
        with self.cond:
            while not all(text in self.out[s] for s, text in expected) and self.open:
                if not self.cond.wait(max(0.0, deadline - time.monotonic())) and \
                        time.monotonic() >= deadline:
                    break
            return all(text in self.out[s] for s, text in expected)

    def close(self, timeout):
        for r in self.readers:
            r.join(timeout)
        os.close(self.master)


def paste(text, folder, key):
    """Run text as pasted (see the module's doc); (bash's status, stdout, stderr, expected met)."""
    (folder / ".venv").symlink_to(ROOT / ".venv")
    if key in PREPARE:
        PREPARE[key](folder)
    with Namespace(folder) as ns:
        context = CONTEXT.get(key) or ALONE.get(key)
        if context:
            ns.context(context)
        deadline = time.monotonic() + DEADLINE + PER_LINE * len(text.strip().splitlines())
        term = ns.paste(text)
        try:
            status = term.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            met = term.wait_for(EXPECT.get(key, ()), deadline)
        finally:
            ns.stop()
            term.close(10)
    return status, term.out["stdout"], term.out["stderr"], met


def check(key, status, out, err, met, folder):
    why = f"\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    if (folder / "context.log").exists():
        why += f"\n--- context\n{(folder / 'context.log').read_text()[-2000:]}"
    assert status == 0, f"exit status {status}" + why
    assert met, f"not shown: {[t for s, t in EXPECT[key] if t not in (out, err)[s == 'stderr']]}" + why
    assert "Traceback" not in err, why


@pytest.mark.timeout(600)  # past any block's deadline (pyproject's 120 s is less)
@pytest.mark.parametrize("key", RUN)
def test_readme_block_works_as_pasted(key, tmp_path):
    """The block's whole text, verbatim, in one interactive bash."""
    if namespaces_missing():
        pytest.skip(namespaces_missing())
    text, _ = BLOCKS[key]
    check(key, *paste(text, tmp_path, key), tmp_path)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("key", sorted(ALONE))
def test_readme_line_of_an_excluded_block_works_alone(key, tmp_path):
    """The line as it is in the README (its comment too), after its CONTEXT."""
    if namespaces_missing():
        pytest.skip(namespaces_missing())
    line = next(raw for _, (_, lines) in BLOCKS.items() for raw in lines if command(raw) == key)
    check(key, *paste(line + "\n", tmp_path, key), tmp_path)
