"""A real Prometheus server for the tests: Debian's /usr/bin/prometheus on 127.0.0.1 (a port the
kernel picks), scraping the given targets every second, with its storage in a temporary
directory; stopped and waited for on every way out."""
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

from pelotari.harness.procs import bound_port

PROMETHEUS = "/usr/bin/prometheus"


class Prometheus:
    """`with Prometheus(tmp_path, ["127.0.0.1:PORT"]) as prom: prom.query("up")`."""

    def __init__(self, workdir, targets, job="pelotari"):
        self.workdir, self.targets, self.job = workdir, list(targets), job
        self.proc = None
        self.url = None

    def __enter__(self):
        binary = shutil.which("prometheus") or PROMETHEUS
        config = self.workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: {self.job}\n"
            f"    static_configs:\n      - targets: {json.dumps(self.targets)}\n")
        self.log = open(self.workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             "--web.listen-address=127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            port = bound_port(self.proc.pid, socket.SOCK_STREAM, timeout=30)
            self.url = f"http://127.0.0.1:{port}"
            self.wait(lambda: self._get("/-/ready", raw=True), 30, "Prometheus to be ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def _get(self, path, raw=False):
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as answer:
                body = answer.read()
        except OSError:
            return None
        return body if raw else json.loads(body)

    def query(self, promql):
        """The instant vector PromQL gives now, as [(labels, value)]."""
        answer = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if not answer or answer.get("status") != "success":
            return []
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def targets_health(self):
        """{scrape URL: health} of the active targets ('up', 'down', 'unknown')."""
        answer = self._get("/api/v1/targets") or {}
        return {t["scrapeUrl"]: t["health"]
                for t in answer.get("data", {}).get("activeTargets", [])}

    def wait(self, predicate, timeout, what):
        """predicate()'s first true value, polled until timeout; AssertionError naming what."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited (rc {self.proc.returncode}): "
                                     + (self.workdir / "prometheus.log").read_text()[-2000:])
            value = predicate()
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}")
