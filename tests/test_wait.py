"""`pelotari wait PID`: it returns once a command in the background is ready, fails at once when
it ends first, and takes no record a killed process left behind for a new one."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from pelotari.cli import ready

from conftest import PELOTARI

pytestmark = pytest.mark.e2e
DEADLINE = 60  # seconds; what takes a second here may take ten on a slow machine


def wait(*args, timeout=DEADLINE + 30):
    return subprocess.run(PELOTARI + ["wait", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def start(*args, **popen):
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(PELOTARI + list(args), stdin=subprocess.DEVNULL, text=True, **popen)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_subscriber_is_ready_once_signed_on_and_gets_what_is_published_next():
    port = free_udp_port()
    sub = start("sub", "-b", f"127.0.0.1:{port}", "--count", "1")
    backbone = None
    try:
        # no backbone yet: the subscriber keeps trying, and is not ready
        res = wait("--timeout", 1, sub.pid)
        assert res.returncode == 1
        assert f"process {sub.pid} (pelotari sub -b 127.0.0.1:{port} --count 1) is not ready " \
               "after 1 s" in res.stderr
        backbone = start("backbone", "--host", "127.0.0.1", "--port", str(port))
        res = wait(sub.pid)
        assert res.returncode == 0, res.stderr
        assert ready.is_ready(sub.pid)
        pub = subprocess.run(PELOTARI + ["pub", "-b", f"127.0.0.1:{port}", "first"],
                             capture_output=True, text=True, timeout=DEADLINE)
        assert pub.returncode == 0, pub.stderr
        out, err = sub.communicate(timeout=DEADLINE)  # --count 1: it ends with the message
        assert sub.returncode == 0 and out.endswith("\tfirst\n"), err
        assert not ready.is_ready(sub.pid)
        assert not (ready.directory() / f"ready-{sub.pid}.json").exists()  # gone with it
    finally:
        stop(sub)
        if backbone is not None:
            stop(backbone)


def test_wait_fails_at_once_when_the_command_ends_before_it_is_ready():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        backbone = start("backbone", "--host", "127.0.0.1", "--port", str(taken.getsockname()[1]))
        started = time.monotonic()
        res = wait(backbone.pid)  # the backbone cannot bind: it ends (a zombie until reaped)
        took = time.monotonic() - started
        _, err = stop(backbone)
    assert res.returncode == 1 and f"process {backbone.pid} ended before it was ready" in res.stderr
    assert took < DEADLINE / 2  # at once, not at the timeout
    assert backbone.returncode == 1 and "Address already in use" in err


def test_a_command_started_through_a_wrapper_is_waited_for(tmp_path):
    # `bash tools/run backbone &`, `timeout 60 pelotari sub &`: $! is the wrapper's
    log = open(tmp_path / "backbone.log", "w")
    wrapper = subprocess.Popen(["bash", "-c", " ".join(PELOTARI) +
                                " backbone --host 127.0.0.1 --port 0 --metrics 0; true"],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               start_new_session=True)
    try:
        res = wait(wrapper.pid)
        assert res.returncode == 0, res.stderr
        text = (tmp_path / "backbone.log").read_text()
        assert "listening on 127.0.0.1:" in text and "metrics at http://127.0.0.1:" in text
    finally:
        os.killpg(wrapper.pid, 15)
        wrapper.wait(DEADLINE)
        log.close()


def test_several_pids_and_a_missing_one():
    one = start("backbone", "--host", "127.0.0.1", "--port", "0")
    two = start("backbone", "--host", "127.0.0.1", "--port", "0")
    try:
        assert wait(one.pid, two.pid).returncode == 0
    finally:
        stop(one)
        stop(two)
    res = wait(one.pid)
    assert res.returncode == 1 and f"no process {one.pid}" in res.stderr


def test_a_record_is_taken_only_for_the_process_that_wrote_it(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        folder = ready._private(ready.directory(), create=True)
        record = folder / f"ready-{sleeper.pid}.json"
        # left by a killed process that had the same ID: another start time
        record.write_text(json.dumps({"pid": sleeper.pid,
                                      "started": ready.start_ticks(sleeper.pid) - 1}))
        assert not ready.is_ready(sleeper.pid)
        res = wait("--timeout", 0.2, sleeper.pid)
        assert res.returncode == 1 and "not ready after 0.2 s" in res.stderr
        record.write_text(json.dumps({"pid": sleeper.pid,
                                      "started": ready.start_ticks(sleeper.pid)}))
        assert ready.is_ready(sleeper.pid)
        assert wait(sleeper.pid).returncode == 0
        # announcing sweeps the stale records (of processes gone), keeps the live ones
        (folder / "ready-999999999.json").write_text(json.dumps({"pid": 999999999, "started": 1}))
        ready.announce("a test")
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [f"ready-{sleeper.pid}.json", f"ready-{os.getpid()}.json"])
        assert ready.is_ready(os.getpid())
    finally:
        sleeper.kill()
        sleeper.wait()
        ready._withdraw()
        ready._announced.clear()


def test_a_directory_others_can_use_is_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "pelotari").mkdir(mode=0o777)
    os.chmod(tmp_path / "pelotari", 0o777)  # whatever the umask
    ready.announce("pelotari backbone")
    assert list((tmp_path / "pelotari").iterdir()) == []
    assert ("warning: cannot record that `pelotari backbone` is ready for `pelotari wait`: "
            f"{tmp_path / 'pelotari'} is not a directory of this user's alone (mode 0700)"
            ) in capsys.readouterr().err
    assert not ready.is_ready(os.getpid())


def test_a_record_in_a_directory_others_can_write_is_not_believed(monkeypatch, tmp_path):
    """A stranger who made the directory (or opened it up) and wrote a record for our process
    cannot make `pelotari wait` go on."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = tmp_path / "pelotari"
    folder.mkdir()
    os.chmod(folder, 0o777)
    forged = {"pid": os.getpid(), "started": ready.start_ticks(os.getpid()), "command": "forged"}
    (folder / f"ready-{os.getpid()}.json").write_text(json.dumps(forged))
    assert not ready.is_ready(os.getpid())
    os.chmod(folder, 0o700)  # the same record in a private directory is believed
    assert ready.is_ready(os.getpid())


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_timeout_that_is_no_finite_number_is_refused(value):
    res = subprocess.run(PELOTARI + ["wait", "--timeout", value, str(os.getpid())],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--timeout" in res.stderr.splitlines()[-1]


@pytest.mark.parametrize("make", ["open to others", "another user's", "a file"])
def test_wait_fails_at_once_when_the_directory_cannot_be_believed(monkeypatch, tmp_path, make):
    """Nothing can announce there: not a wait until --timeout, but one line and status 1 at once."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = tmp_path / "pelotari"
    if make == "a file":
        folder.write_text("")
    else:
        folder.mkdir()
        os.chmod(folder, 0o777 if make == "open to others" else 0o700)
    if make == "another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(folder, 65534, 65534)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        res = wait("--timeout", 3600, sleeper.pid, timeout=DEADLINE)  # hangs: TimeoutExpired
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 1
    assert res.stderr == (f"Error: {folder} is not a directory of this user's alone (mode 0700), "
                          "so no command can record there that it is ready: remove it (or give "
                          "it to this user, mode 0700)\n")
