"""bench/fuzz: every target's invariant holds on its seeds and on the inputs that once broke
one, the invariants can fail, a short atheris run of every target finds nothing, and the
runner's commands work as bench/fuzz/__main__.py documents them."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fuzz import registry
from bench.fuzz.common import Broken, Script, mutate

ROOT = Path(__file__).resolve().parent.parent

# Inputs the fuzzer found that broke an invariant, each replayed through its target; the fix and
# a test written out by hand sit next to the parser's or core's own tests.
REGRESSIONS = [
    # a requester that left was still answered (tests/test_potato_core.py,
    # test_no_answer_goes_to_a_requester_that_went_away)
    ("potato-node", b"\xff\xfa\x00\x01\x00\x02\x00\x03\x01\x00\x03\x00\x00.\x01\x00\x01\x00"
                    b"0123be8514ef23e154540de99abd83d6c24fdbb26c\x02&"),
    # a proposal on a table full of others' open elections went one past max_elections
    # (tests/test_potato_core.py, ..._table_cannot_stop_our_proposal)
    ("potato-node",
     b"\x00\x00\x01\x00\x01]]]]]]]]\xd3\xd3-(\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3"
     b"\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3"
     b"\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3\xd3]]]]]\x00\x02"),
    # a late copy of an election the node had let go was voted on again
    # (tests/test_potato_core.py, ..._forgotten_election_gets_no_second_vote)
    ("potato-node",
     b"\x00C\x00\x00\x00\x01\xc2\xc2JJ\xcc\xcc\xcc3\xc2\xc2\xc2\xc2x#\x1c\x1c\x1c\x00"
     b"\x00\xc2\xc2\xc2\xc2\xc2JJ\xcc40\xcc\xcc\x00\x00\x00\xc2\xc2\xc2\xc2\xc2\xc2"
     b"\xc2\xc2\xc2\xc2\xc2x\x00\x1c::::::::]\x00]]]\xec\xcc\xcc\x00\x01]\x00\x02\xcc%"
     b"\xccE\xcc\xcc\xcc\xec]\x00]]]\xec\xcc\xcc\x00\x01]\x00\x00\x00,\x00\x00\x00\x07"
     b"\x00\x02\xcc%\xccE\xcc\xcc\xcc\xec\xcc\x00\xcc\x00\xcc\xcc\x01]\x00\x02\xcc%"
     b"\xccE\xcc\xcc\xcc\xec\xcc\x00\xcc\xcc\xcc\xcc\xcc\xcc\xcc\xcc\x01]\x00\x02\xcc%"
     b"\xccE\xcc\xcc\xcc\xec\xe8#%\xcc\xcc\xcc\xcc\xb5\xcc\x00\x00\x00\x001\x00\x00"
     b"\x00\x00\x00\x00\x00\x00\x00\x00\x00%\xcc\xcd\xcc\xcc:::;:::::::::::::::::::::::"
     b":::::::::::::::\x1c\x1c\x00\xf5]\x00\x00JJJJJ\xcc"),
    # a frame on itself as parent was taken (and, once the history had let it go, again)
    # (tests/test_potato_core.py, ..._a_frame_is_not_its_own_parent)
    ("potato-node",
     b"\x00C\x00\x00\x00\x01\xc2\x00\x00\x00\x00\x00\x00\x00:::f\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
     b"\x00\x00\x00\x00\x00\x00\x00\x00?]\x00]]]]\x00\x02\xcc\xcc\xcc\xcc\xcc\xcc\xcc~"
     b"\xcc%\xccG\xcc\xdc\xcc]]]\xcc\x00\xcc\xcc\xcc\xcc\xcc\xcc\xcc%\xcc\xcd\xcc\xcc"
     b"\xcc\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\xc5\xc5\xc5\xc5\xc5\xcd:0:`:::::f2\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b:::f\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\xc5\xc5\xc5\xc5\xc5\xcd:\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b%\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x8b\x00\x00\x01\x00\x00\x00\x00\x00\x8b\x8b"
     b"\x8b\x8b\x8b\x8b\x8b\xc5\xc5\xc5\xc5\xc5\xcd:8:`:::::f2c62a2\x1c\x00\xf5]\x00"
     b"\x00JJJ\xcc"),
    # a `type` that is an object or array raised TypeError (a dict lookup): a traceback per
    # message on a live node's stderr (tests/test_potato_hostile.py,
    # test_a_type_that_is_no_string_is_an_unknown_type)
    ("potato-wire", b'{"type":"indirect_election_request","identifier":"3","from":"b","visited":[],'
                    b'"type":{"paent":200}}'),
    # not a bug in the client: the harness forgot that the backbone may FORWARD to a host that
    # also sent garbage; what that host gets is bounded by the repair budget, checked since
    ("fyrehose-client",
     b"\x00\x00\x00\x00\n\x01\x00\x01\x00\x00\x00\x00\x00\x00\x06\x00\x00\x00\x00\x01"
     b"\x00\x00\x00\x00\x00\x01a\x01\x06\x00\x00\x00\x00\x03k\x80%\n\x01\x01\x00\x00"
     b"\x00\x00\x00\x01a\x00\x00\x00\x00\x01a\x00\x01\x00\x00\x00\x00\x00\x01a\x00\x01"
     b"\x00\x00\x00\x00\x00\x01a\x01.\x00\x00\x00\x00\x01a\x01\x06\x00\x10\x00\x00\x03k"
     b"\x00\x01\x00\x00\x00\x00\x00\x01a\x00\x00\x00\x00\x01a\x00-\x00\x00\x00\x00\x00"
     b"\x01a\x01\x06\x00\x00\x00\x00\x03k\x00\x01\x00\x00\x00\x00\x00\x03k\x00\x01\x00"
     b"\x00\x00\x00\x00\x01a\x00\x01\x00\x00\x00\x00\x00\x01a\x00\x00\x00\x01.\x01a"
     b"\x00\x01\x00\x00\x10\x00\x00\x03k\x00\x00\x00\x00\x01a\x00\x01\x00\x00\x00\x00"
     b"\x00\x01a\x00-\x00\x00\x00\x00\x00\x01a\x00\x01\x00\x00\x00\x00\x00\x03k\x00"
     b"\x01\x00\x00\x00\x00\x00\x01a\x00\x01\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00"
     b"\x00\x00\x00\x00\x01a\x01\x06\x00\x00\x00\x00\x03k\x00\x01\x00\x00\x00\x00\x00"
     b"\x01a"),
]


def fuzz(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "bench.fuzz", *args], cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_target_holds_on_its_seeds(name):
    target = registry.load(name)
    seeds = list(target.seeds())
    assert seeds and target.invariant
    for data in seeds:
        target.one_input(data)
    target.one_input(b"")  # the empty input is an input too


@pytest.mark.parametrize("name,data", REGRESSIONS, ids=[n for n, _ in REGRESSIONS])
def test_inputs_that_once_broke_a_target_hold(name, data):
    registry.load(name).one_input(data)


def test_an_invariant_can_fail(monkeypatch):
    from pelotari.potato import wire

    target = registry.load("potato-wire")
    first, second = list(target.seeds())[:2]
    monkeypatch.setattr(wire, "encode", lambda msg: second)  # an encoder that loses the message
    with pytest.raises(Broken, match="decode"):
        target.one_input(first)


def test_the_client_target_catches_repairs_past_the_budget(monkeypatch):
    from pelotari.fyrehose.core import ClientCore

    real = ClientCore._on_forward

    def greedy(self, fwd, addr, now):  # a client that sends every repair ten times
        before = len(self._out)
        real(self, fwd, addr, now)
        self._out.extend(self._out[before:] * 9)

    monkeypatch.setattr(ClientCore, "_on_forward", greedy)
    with pytest.raises(Broken, match="repair budget"):
        registry.load("fyrehose-client").one_input(REGRESSIONS[-1][1])


def test_a_script_replays_the_same_choices_and_runs_dry_without_error():
    s = Script(b"\x05\x01\x02abc")
    assert (s.below(3), s.pick("xyz"), s.blob(), s.take(1), bool(s)) == (2, "y", b"ab", b"c", False)
    assert (s.byte(), s.below(1000), s.blob()) == (0, 0, b"")
    assert mutate(Script(b""), b"abc") == b"abc"


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_list_names_every_target_with_its_invariant():
    out = fuzz("list")
    assert out.returncode == 0, out.stderr
    for name in registry.NAMES:
        assert name in out.stdout
    assert "never anything else" in out.stdout


@pytest.mark.parametrize("args,needle", [
    (("run", "nope", "--runs", "1"), "no target 'nope'"),
    (("run", "potato-wire"), "say how long"),
    (("replay", "nope", "README.md"), "no target 'nope'"),
    # a review found these were tracebacks, or (a fraction, a value past a C int) ran for ever
    (("run", "potato-wire", "--seconds", "nan"), "nan is not a number of seconds"),
    (("run", "potato-wire", "--seconds", "inf"), "not in the range"),
    (("run", "potato-wire", "--seconds", "4294967297"), "not in the range"),
    (("run", "potato-wire", "--runs", "10", "--work", "/proc/none"), "--work /proc/none"),
    (("coverage", "nope"), "no target 'nope'"),
])
def test_a_users_mistake_is_one_line(args, needle):
    out = fuzz(*args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr


def test_an_unwritable_out_is_refused_before_any_fuzzing(tmp_path):
    # It was found only when the first target's record was written: after the fuzzing, a
    # traceback, and the other targets never ran.
    work = tmp_path / "work"
    out = fuzz("run", "potato-wire", "--runs", "10", "--work", str(work), "--out", "/proc/none/x.jsonl")
    assert out.returncode == 2 and "--out /proc/none/x.jsonl" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (work / "corpus" / "potato-wire").exists()


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_second_run_of_a_target_in_the_same_work_is_refused(tmp_path):
    # It truncated the running one's log and recorded that run's coverage as its own.
    import fcntl

    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    with open(work / "logs" / "potato-wire.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a run in progress
        out = fuzz("run", "potato-wire", "--runs", "10", "--work", str(work))
    assert out.returncode == 1 and "another run of potato-wire is using" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (work / "logs" / "potato-wire.log").exists()
    assert fuzz("run", "potato-wire", "--runs", "10", "--work", str(work)).returncode == 0  # lock gone


@pytest.mark.slow  # over half a second (tests/conftest.py: the fast loop)
def test_a_fraction_of_a_second_rounds_up_and_the_rate_is_not_zero(tmp_path):
    # libFuzzer takes whole seconds and reads 0 as no limit; its rate is per whole second.
    results = tmp_path / "fuzz.jsonl"
    out = fuzz("run", "bully-framing", "--seconds", "0.5", "--work", str(tmp_path / "work"),
               "--out", str(results), timeout=120)
    assert out.returncode == 0, out.stderr
    record = json.loads(results.read_text())
    assert record["inputs"] > 0 and record["inputs_per_second"] > 0 and record["seconds"] < 60, record


@pytest.mark.parametrize("text,needle", [
    (b"\xff\xfe", "not text"),
    (b"nope\n", ":1: not JSON"),
    (b"[1, 2]\n", ":1: not a fuzz record"),
    (b'{"kind": "bench", "target": "x"}\n', ":1: not a fuzz record"),
    (b'\n{"kind": "fuzz", "target": "potato-wire"}\n', ":2: a fuzz record with a bad 'commit'"),
    (b"", "no fuzz records"),
])
def test_report_of_what_is_no_records_file_is_one_line(tmp_path, text, needle):
    path = tmp_path / "records.jsonl"
    path.write_bytes(text)
    out = fuzz("report", str(path))
    assert out.returncode == 1 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_report_leaves_out_a_target_it_does_not_know_and_says_so(tmp_path):
    records = (ROOT / "docs" / "fuzz" / "fuzz.jsonl").read_text().splitlines()
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join([records[0].replace(json.loads(records[0])["target"], "renamed")] + records) + "\n")
    out = fuzz("report", str(path))
    assert out.returncode == 0 and "1: no target 'renamed' here" in out.stderr
    assert out.stdout == fuzz("report", str(ROOT / "docs" / "fuzz" / "fuzz.jsonl")).stdout


def test_build_without_cython_says_so_in_one_line():
    # A fresh venv had Cython only in pip's isolated build env: `build` was a traceback.
    code = ("import sys\n"
            "class NoCython:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'Cython':\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, NoCython())\n"
            "sys.argv = ['bench.fuzz', 'build']\n"
            "import runpy; runpy.run_module('bench.fuzz', run_name='__main__')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [
        "Error: no Cython in this environment: pip install 'cython>=3.0.10' "
        "(or reinstall with `pip install -e '.[test]'`)"], out.stderr


def test_replay_says_what_each_input_does(tmp_path):
    good = tmp_path / "good"
    good.write_bytes(REGRESSIONS[0][1])
    out = fuzz("replay", "potato-node", str(good))
    assert out.returncode == 0 and "holds" in out.stdout, out.stdout + out.stderr


def test_the_readmes_fuzz_table_is_the_report_of_the_committed_records():
    """The README quotes `fuzz report docs/fuzz/fuzz.jsonl` as it is: each target's newest record
    of those its goal runs wrote (a rerun's record is appended; older ones stay as history)."""
    records = [json.loads(line) for line in (ROOT / "docs/fuzz/fuzz.jsonl").read_text().splitlines()]
    assert records and all(r["kind"] == "fuzz" and r["exit"] == 0 for r in records)
    for r in records:
        goal = registry.load(r["target"]).goal
        assert r["native_coverage"] or r["inputs"] >= goal, r  # the goal runs reached their goal
    out = fuzz("report", "docs/fuzz/fuzz.jsonl")
    rows = {(r["target"], r["native_coverage"]) for r in records}
    assert out.returncode == 0 and out.stdout.count("\n") == len(rows) + 2, out.stderr
    assert out.stdout.strip() in (ROOT / "README.md").read_text()


@pytest.mark.slow
def test_a_short_atheris_run_of_every_target_finds_nothing(tmp_path):
    """The smoke run: 400 inputs per target under atheris with libFuzzer's mutations."""
    results = tmp_path / "fuzz.jsonl"
    out = fuzz("run", "--runs", "400", "--work", str(tmp_path / "work"), "--out", str(results))
    assert out.returncode == 0, out.stdout + out.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["target"] for r in records] == registry.NAMES
    for r in records:
        assert r["exit"] == 0 and r["crashes"] == [], r
        assert r["inputs"] >= 400 and r["coverage_edges"] > 0 and r["corpus"] > 0, r
    table = fuzz("report", str(results))
    assert table.returncode == 0 and all(f"| {n} |" in table.stdout for n in registry.NAMES)
    reached = fuzz("coverage", "potato-wire", "prototari-node", "swarm-node", "--work", str(tmp_path / "work"))
    assert reached.returncode == 0, reached.stderr
    shares = {row.split("|")[2].strip(" `"): (float(row.split("|")[3].strip(" %")),
                                              float(row.split("|")[4].strip(" %")))
              for row in reached.stdout.splitlines()[2:]}
    assert set(shares) == {"pelotari/potato/wire.py", "pelotari/prototari/core.py",
                           "pelotari/prototari/wire.py", "pelotari/swarm/core.py",
                           "pelotari/swarm/wire.py", "pelotari/swarm/table.py"}
    assert all(20 < share <= 100 for pair in shares.values() for share in pair), shares
    # the connection table's twin runs only with the twins: compiled, its lines are the module's top
    built = importlib.util.find_spec("fastpath.swarmtable") is not None
    cython, twins = shares["pelotari/swarm/table.py"]
    assert twins > cython + 20 if built else twins == cython, shares


@pytest.mark.slow
@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM"])
def test_ctrl_c_stops_the_run_and_its_fuzzer_in_one_line(tmp_path, how):
    import os
    import signal
    import time

    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "bench.fuzz", "run", "potato-wire", "--seconds",
                             "60", "--work", str(tmp_path)], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    # Until the fuzzer is started (a loaded machine may take long to get there), or the
    # runner ended without one.
    deadline = time.monotonic() + 300
    while not psutil.Process(proc.pid).children() and proc.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    assert children, f"the fuzzer never started: {proc.poll()=}"
    time.sleep(1)
    if how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    else:
        proc.terminate()  # as a service manager or `kill`: the runner alone (it left its fuzzer)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted during potato-wire" in err and "Traceback" not in err, err
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
