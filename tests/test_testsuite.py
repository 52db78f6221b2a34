"""tools/testsuite.py (`bash tools/run test`): its arguments, and that a stop leaves nothing
running. Run against a stand-in pytest (a module that shadows it from the copy's folder) and a
stand-in stress-ng, so no suite runs inside the suite."""
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_for

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent

# (Ctrl-C may come as soon as child.pid exists: the child is made and named inside the try,
# or a Ctrl-C before it left the child holding the test's pipes for 300 s.)
FAKE_PYTEST = """\
import os, subprocess, sys, time
try:
    child = subprocess.Popen(["sleep", "300"], start_new_session=True, env={**os.environ})
    open("child.pid", "w").write(str(child.pid))
    print("collected", flush=True)
    time.sleep(300)
except KeyboardInterrupt:
    child.kill()
    open("teardown", "w").write("ran")
    sys.exit(2)
"""


@pytest.fixture
def copy(tmp_path):
    """A folder with tools/testsuite.py, a stand-in pytest.py and a stand-in stress-ng."""
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "testsuite.py", tmp_path / "tools")
    (tmp_path / "pytest.py").write_text(FAKE_PYTEST)
    (tmp_path / "bin").mkdir()
    burner = tmp_path / "bin" / "stress-ng"
    burner.write_text("#!/bin/sh\nexec sleep 301\n")  # 301: told from the child
    burner.chmod(0o755)
    return tmp_path


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_tears_pytest_down_and_stops_the_burner(copy, sig):
    env = {**os.environ, "PATH": f"{copy / 'bin'}:{os.environ['PATH']}"}
    # SIGINT ignored, as bash starts a script's background job: Ctrl-C must still work
    proc = subprocess.Popen([sys.executable, "tools/testsuite.py", "--under-load", "--workers",
                             "1"], cwd=copy, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert wait_for(lambda: (copy / "child.pid").exists(), 60)
    burners = [p for p in Path("/proc").glob("[0-9]*") if (p / "cmdline").exists()
               and (p / "environ").exists() and b"sleep\x00301" in (p / "cmdline").read_bytes()]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (out, err)
    assert err.splitlines()[-1] == "tools/run test: interrupted", err
    assert (copy / "teardown").read_text() == "ran"  # pytest had its Ctrl-C: fixtures tore down
    child = int((copy / "child.pid").read_text())
    assert wait_for(lambda: not alive(child), 30)
    assert burners and wait_for(lambda: not any(alive(int(p.name)) for p in burners), 30)


@pytest.mark.parametrize("args,env,message", [
    (["--rounds", "²"], {}, "--rounds must be a whole number >= 1, not '²'"),
    (["--rounds", "0"], {}, "--rounds must be a whole number >= 1, not '0'"),
    (["--workers", "0"], {}, "--workers must be a whole number >= 1 or auto, not '0'"),
    ([], {"PELOTARI_TEST_WORKERS": "x"},
     "PELOTARI_TEST_WORKERS must be a whole number >= 1 or auto, not 'x'"),
    (["-k", "x", "--under-load"], {}, "--under-load goes before pytest's arguments, as its own word"),
    (["--rounds=3"], {}, "--rounds goes before pytest's arguments, as its own word"),
])
def test_bad_arguments_are_one_line(copy, args, env, message):
    res = subprocess.run([sys.executable, "tools/testsuite.py", *args], cwd=copy,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stderr) == (2, f"tools/run test: {message}\n")
    assert not (copy / "child.pid").exists()  # no pass started


def test_help_is_the_runners_own_and_starts_no_pass(copy):
    res = subprocess.run([sys.executable, "tools/testsuite.py", "--help"], cwd=copy,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("usage: bash tools/run test")
    assert "--workers" in res.stdout and "PELOTARI_TEST_WORKERS" in res.stdout
    assert not (copy / "child.pid").exists()


def test_arguments_that_match_no_test_in_any_pass_are_a_failure(copy):
    (copy / "pytest.py").write_text(
        'print("============ 12 deselected in 0.01s ============")\nraise SystemExit(5)\n')
    res = subprocess.run([sys.executable, "tools/testsuite.py", "--workers", "1", "-k", "nope"],
                         cwd=copy, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stdout.splitlines()[-1] == \
        "tools/run test: no test ran in any pass (pytest's arguments matched none)"
