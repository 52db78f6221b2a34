"""Ctrl-C (and SIGTERM) at any moment leaves one line, status 130 and nothing running: while
the CLI is still being imported, and while `pelotari trend` starts Spark or runs its analysis
(a JVM that ignores SIGINT and prints Java stack traces when stopped mid-job)."""
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import PELOTARI

pytestmark = pytest.mark.e2e
DOCS = __import__("pathlib").Path(__file__).resolve().parent.parent / "docs" / "bench"


def test_ctrl_c_while_the_cli_is_imported_is_one_line():
    # A KeyboardInterrupt raised by the import of pelotari.cli itself, as Ctrl-C in the first
    # tenth of a second does (deterministic: a meta-path finder raises it).
    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'pelotari.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "sys.argv = ['pelotari', '--help']\n"
            "import runpy; runpy.run_module('pelotari', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 130 and done.stderr == "interrupted\n", done.stderr


def _trend(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(DOCS / "bench-issue15.jsonl", results)
    return subprocess.Popen(PELOTARI + ["trend", str(results), "-o", str(tmp_path / "out")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _interrupted_cleanly(proc, sig):
    started = set()
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            started |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.Error:
            pass
        if started:
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "py4j" not in err and "Exception" not in err, err
    assert err.splitlines()[-1] == "interrupted", err
    time.sleep(0.5)
    left = [p for p in started if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left, [psutil.Process(p).cmdline()[:3] for p in left]
    return err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_trend_while_spark_starts_leaves_no_jvm(tmp_path, sig):
    proc = _trend(tmp_path)
    err = _interrupted_cleanly(proc, sig)  # as soon as the JVM's launcher has started
    assert "starting Spark" in err


def test_interrupting_trend_during_the_analysis_is_one_line(tmp_path):
    proc = _trend(tmp_path)
    for line in proc.stderr:
        if "analysing" in line:
            break
    else:
        pytest.fail("trend never reached its analysis")
    time.sleep(0.5)
    _interrupted_cleanly(proc, signal.SIGINT)


@pytest.mark.parametrize("py4j_does", ["raise its own error", "swallow it"])
def test_an_interrupt_py4j_turns_into_its_own_error_is_still_one_line(tmp_path, py4j_does):
    # What CI saw once: the KeyboardInterrupt landed in PySpark's error handling, which then
    # failed on the half-read connection and raised Py4JNetworkError instead. Made
    # deterministic: the analysis gets the signal and does what py4j did (or swallows it).
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(DOCS / "bench-issue15.jsonl", results)
    swallow = py4j_does == "swallow it"
    code = ("import os, signal, sys, time\n"
            "from py4j.protocol import Py4JNetworkError\n"
            "from pelotari.analysis import report\n"
            "def analyse(frames, threshold):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        time.sleep(5)\n"
            "    except KeyboardInterrupt:\n"
            f"        if {swallow}:\n"
            "            return report_analyse(frames, threshold)\n"
            "        raise Py4JNetworkError('Answer from Java side is empty')\n"
            "report_analyse, report.analyse = report.analyse, analyse\n"
            f"sys.argv = ['pelotari', 'trend', {str(results)!r}, '-o', {str(tmp_path / 'out')!r}]\n"
            "import runpy; runpy.run_module('pelotari', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "Py4J" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == "interrupted", done.stderr
