"""Every command in README.md's shell blocks is run here as a user would run it (the venv's
bin on PATH, a fresh folder, stdin /dev/null) or named below with why it is not (it runs for
minutes, needs root, or is an interactive server a user starts in another terminal and which
its own test covers). A README command in neither list fails the test, so none slips by.

Convention: shell commands live in ```sh blocks, one per line (a `\\` continues it); `#` starts
a comment. A block whose first line is one of BLOCKS' keys runs as one bash script, with its
fixed ports swapped for free ones.
"""
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# Run alone; each must exit 0.
RUN = {
    "pelotari bench --list",
    "pelotari craft request --from-seq 5 --to-seq 9 --hexdump",
    "pelotari craft --list",
    "pelotari craft broadcast -F body='{\"frame\": \"f1\", \"parent\": \"INITIAL\"}' --hexdump",
    "pelotari craft swarm connect -F attempt=3 -F ack=1 -F token=7 -F echo=9 --hexdump",
    "pelotari craft swarm connections -F entries=10.0.0.1:21452,vague:[2001:db8::1]:21452 "
    "--hexdump",
    "pelotari swarm keygen -o swarm.key",
    "mkdir -p results",
}
# Blocks run whole (first command -> the fixed ports in it, given free ones).
BLOCKS = {
    "pelotari backbone --metrics 9466 &": ("9466",),
    "pelotari backbone &": ("2323",),
}
MINUTES = "takes minutes (a benchmark or simulation); its own tests run it small"
SERVER = "a server a user leaves running in a terminal; its own tests start it (tests/{})"
ROOTED = "needs root (sudo); its own test runs it in a namespace or as root (tests/{})"
NOT_RUN = {
    "bash tools/run demo": "the set-up itself: CI runs `bash tools/run test`; tests/test_cli.py runs the demo",
    "bash tools/run test": "the test suite that runs this test",
    "pelotari backbone": SERVER.format("test_cli.py"),
    "pelotari sub": SERVER.format("test_cli.py"),
    "pelotari pub hello world": "needs the backbone above; tests/test_cli.py publishes through one",
    "pelotari prototari": "broadcasts on the host's LAN: only ever run in test namespaces (tests/test_prototari_lan.py)",
    "pelotari bully start --bind 127.0.0.1:3333": SERVER.format("test_bully_node.py"),
    "pelotari bully join 127.0.0.1:3333 --bind 127.0.0.1:3334 --clock-offset 2.5": SERVER.format("test_bully_node.py"),
    "pelotari bully join 127.0.0.1:3333 --bind 127.0.0.1:3335 --clock-offset -1.25": SERVER.format("test_bully_node.py"),
    "pelotari bully join 127.0.0.1:3333 --bind 127.0.0.1:3336": SERVER.format("test_bully_node.py"),
    "pelotari potato node --name A --listen 127.0.0.1:4001": SERVER.format("test_potato_node.py"),
    "pelotari potato node --name B --listen 127.0.0.2:4002 --connect 127.0.0.1:4001": SERVER.format("test_potato_node.py"),
    "pelotari potato node --name C --listen 127.0.0.3:4003 --connect 127.0.0.2:4002": SERVER.format("test_potato_node.py"),
    "pelotari swarm node --listen 127.0.0.1:21452 --key-file swarm.key": SERVER.format("test_swarm_node.py"),
    "pelotari swarm node --listen 127.0.0.2:21452 --key-file swarm.key --bootstrap 127.0.0.1:21452": SERVER.format("test_swarm_node.py"),
    "pelotari swarm node --listen 127.0.0.3:21452 --key-file swarm.key --bootstrap 127.0.0.1:21452": SERVER.format("test_swarm_node.py"),
    "pelotari swarm simulate --nodes 10000 -o swarm.jsonl": MINUTES,
    "pelotari swarm bench -o swarm.jsonl": MINUTES,
    "pelotari trend .": "needs the swarm records above; tests/test_trend.py runs trend",
    "sudo .venv/bin/python bench/attack/replay.py": "needs root and ~40 s; each attack it replays "
    "is a test of its own (tests/test_hostile_fyrehose.py, tests/test_prototari_attack.py)",
    "pelotari bench --systems pelotari,pelotari-plain,reference,reference-gso --rounds 3": MINUTES,
    "sudo bash bench/peers/install.sh": "installs Debian packages; tools/run runs it before the tests",
    "pelotari bench": MINUTES,
    "pelotari trend docs/bench": "half a minute of Spark; tests/test_cli_interrupts.py and test_trend.py run trend",
    "pelotari bench --systems pelotari,reference -S 16 -N 4 -d 2": MINUTES,
    "pelotari bench --systems pelotari,reference --rounds 3": MINUTES,
    "pelotari trend results/": "needs bench results; tests/test_trend.py runs trend on some",
    ".venv/bin/python -m pytest bench/micro --benchmark-enable --benchmark-group-by=param:case "
    "--benchmark-json=results/micro.json": MINUTES,
    "sudo .venv/bin/pelotari inspect -i lo -f \"udp port 2323 and inbound\" -w session.pcap": ROOTED.format("test_scapy_tools.py"),
    "pelotari sub --count 3 & pelotari pub a b c": "needs the live capture above; tests/test_scapy_tools.py",
    "pelotari inspect session.pcap --follow-gaps": "reads the capture above; tests/test_scapy_tools.py inspects pcaps",
    "pelotari inspect session.pcap --json": "reads the capture above; tests/test_scapy_tools.py",
    "pelotari potato node --name B --transport tcp --listen 127.0.0.1:4002 &": "a block with a craft that needs the client: tests/test_craft.py",
    "pelotari craft direct -F from=A -F to=B -F body=hello --send 127.0.0.1:4002 --wait 1": "tests/test_craft.py pokes a potato client",
    "pelotari inspect mesh.pcap -p potato:4002": "reads a capture; tests/test_scapy_tools.py",
    "pelotari craft swarm ping -F token=random --key-file swarm.key --send 127.0.0.1:21452 --wait 1": "needs a swarm node; tests/test_craft.py",
    "pelotari inspect -i lo -f \"udp port 21452\" -w swarm.pcap": ROOTED.format("test_scapy_tools.py"),
    "pelotari inspect swarm.pcap --key-file swarm.key": "reads the capture above; tests/test_scapy_tools.py",
    "bash tools/run fuzz list": "runs from the repository, not a fresh folder; tests/test_fuzz.py runs `list`",
    "bash tools/run fuzz run --seconds 60": "a minute per target; tests/test_fuzz.py runs every target for 400 inputs",
    "bash tools/run fuzz run --goal --out results/fuzz.jsonl": MINUTES,
    "bash tools/run fuzz report results/fuzz.jsonl": "needs the run above; tests/test_fuzz.py reports its smoke run",
    "bash tools/run fuzz report docs/fuzz/fuzz.jsonl": "runs from the repository, not a fresh folder; "
    "tests/test_fuzz.py checks that the README's table is its output",
    "bash tools/run fuzz coverage": "needs the run above; tests/test_fuzz.py measures its smoke run's corpora",
}


def blocks():
    """README's ```sh blocks as lists of commands (comments dropped, continuations joined)."""
    out = []
    for body in re.findall(r"```(?:sh|bash|console)\n(.*?)```", README.read_text(), re.S):
        commands, pending = [], ""
        for line in body.splitlines():
            line = pending + line.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " " if not line[:-1].endswith(" ") else line[:-1]
                continue
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(re.sub(r"\s+", " ", line))
        out.append(commands)
    return out


def env():
    e = dict(os.environ)
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e["PATH"]
    return e


def free_port():
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        port = tcp.getsockname()[1]
        udp.bind(("127.0.0.1", port))
        return port


def test_every_readme_command_is_run_or_says_why_not():
    seen = set()
    for commands in blocks():
        if commands and commands[0] in BLOCKS:
            seen.update(commands)
            continue
        for c in commands:
            assert c in RUN or c in NOT_RUN, f"README command neither run nor excused: {c!r}"
            seen.add(c)
    stale = (RUN | set(NOT_RUN)) - seen
    assert not stale, f"listed here but gone from the README: {stale}"


@pytest.mark.parametrize("command", sorted(RUN))
def test_readme_command_runs(command, tmp_path):
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("first", sorted(BLOCKS))
def test_readme_block_runs(first, tmp_path):
    block = next(b for b in blocks() if b and b[0] == first)
    script = "set -e\n" + "\n".join(block) + "\n"
    if first == "pelotari backbone &":
        script += "kill %1\n"  # the README leaves it running for the user
    for port in BLOCKS[first]:
        script = script.replace(port, str(free_port()) if port != "2323" else "$PORT")
    e = env()
    e["PORT"] = str(free_port())
    if "$PORT" in script:
        script = script.replace("pelotari backbone &", "pelotari backbone --host 127.0.0.1 --port $PORT &")
        script = script.replace("set -e\n", "set -e\n", 1)
    script = script.replace("&\n", "&\nsleep 1.5\n", 1)  # the server's start-up
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=e, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    if first.startswith("pelotari backbone --metrics"):
        assert "pelotari_fyrehose_pushes_total 0.0" in done.stdout
        assert '"entries": []' in done.stdout
