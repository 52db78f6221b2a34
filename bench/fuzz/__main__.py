"""Run pelotari's fuzz targets: `python -m bench.fuzz --help` (or `bash tools/run fuzz --help`)."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from bench.fuzz import registry
from pelotari.cli.common import PelotariGroup, StatusLine
from pelotari.cli.service import SignalInterrupt

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "build" / "fuzz" / "native"  # the coverage-instrumented Cython build
STAT = re.compile(rb"stat::(\w+):\s+(\d+)")
DONE = re.compile(rb"#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+) corp: (\d+)")


def _seed(corpus: Path, target) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for data in target.seeds():
        (corpus / hashlib.sha1(data).hexdigest()).write_bytes(data)


def _tail(path: Path, size: int = 4096) -> bytes:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - size))
        return f.read()


MAX_SECONDS = 2**31 - 1  # libFuzzer's -max_total_time is a C int


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", param_hint=what)
    return value


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    return out.stdout.strip() or "unknown"


def _environment(native: bool) -> dict:
    env = dict(os.environ)
    if native:
        import atheris

        env["PELOTARI_FUZZ_NATIVE"] = str(NATIVE)

        env["LD_PRELOAD"] = os.path.join(atheris.path(), "asan_with_fuzzer.so")
        # CPython's own allocations are not instrumented: leaks and odd frees there are noise
        env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1:abort_on_error=0"
    return env


@contextlib.contextmanager
def one_run_at_a_time(work: Path, name: str):
    """Hold WORK's lock for target name, or say in one line that another run holds it: two runs
    of a target in one WORK share its log (the second truncated the first's and took its
    figures as its own)."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    with open(work / "logs" / f"{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise click.ClickException(f"another run of {name} is using {work} (give this one its own --work)") from None
        yield


def _dictionary(target, work: Path) -> Path:
    """target's dictionary as libFuzzer's -dict file: a "quoted" token a line, other bytes \\xNN."""
    path = work / "dicts" / f"{target.name}.dict"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join('"' + "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\x{b:02x}"
                                          for b in word) + '"\n' for word in target.dictionary))
    return path


def run_target(target, work: Path, seconds: float, runs: int, native: bool,
               max_len: int) -> dict:
    """Fuzz one target in a subprocess; return its record (inputs, coverage, crashes...)."""
    name = target.name
    corpus, crashes, log = work / "corpus" / name, work / "crashes" / name, work / "logs" / f"{name}.log"
    _seed(corpus, target)
    crashes.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    before = set(os.listdir(crashes))
    words = [f"-dict={_dictionary(target, work)}"] if target.dictionary else []
    options = words + [f"-max_total_time={math.ceil(seconds)}" if seconds else "", f"-runs={runs}" if runs else "",
               "-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048",
               f"-max_len={max_len}", f"-artifact_prefix={crashes}/", str(corpus)]
    started, commit = time.monotonic(), _commit()  # the code the run started with
    status = StatusLine()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bench.fuzz.worker", name] + [o for o in options if o],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=_environment(native), cwd=ROOT)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                if status.due():
                    last = DONE.findall(_tail(log))
                    if last:
                        status.update(f"{name}: {int(last[-1][0]):,} inputs, cov {int(last[-1][1]):,} "
                                      f"after {time.monotonic() - started:.0f} s")
        finally:
            if proc.poll() is None:  # Ctrl-C: libFuzzer got it too; make sure it is gone
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            status.finish()
    text = log.read_bytes()
    stats = {k.decode(): int(v) for k, v in STAT.findall(text)}
    last = DONE.findall(text)
    found = sorted(set(os.listdir(crashes)) - before)
    seconds = time.monotonic() - started
    return {
        "kind": "fuzz", "target": name, "commit": commit, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "implementation": "python" if os.environ.get("PELOTARI_PURE_PYTHON", "") not in ("", "0") else "cython",
        "native_coverage": native, "seconds": round(seconds, 1),
        "inputs": stats.get("number_of_executed_units", 0),
        # libFuzzer's figure is per whole second (0 for a run under one): then the wall clock's
        "inputs_per_second": stats.get("average_exec_per_sec", 0) or round(
            stats.get("number_of_executed_units", 0) / max(seconds, 1e-3)),
        "coverage_edges": int(last[-1][1]) if last else 0, "features": int(last[-1][2]) if last else 0,
        "corpus": len(os.listdir(corpus)), "peak_rss_mb": stats.get("peak_rss_mb", 0),
        "crashes": [str(crashes / f) for f in found], "exit": proc.returncode,
        "log": str(log.resolve().relative_to(ROOT)) if log.resolve().is_relative_to(ROOT) else str(log),
    }


@click.group(cls=PelotariGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Coverage-guided fuzzing (atheris) of every parser and sans-IO core pelotari has.

    Each target states its invariant (`list`); a broken invariant, an exception that is not the
    parser's own ValueError-rooted error, a hang (10 s) or memory past 2 GB is a crash, saved under
    WORK/crashes/TARGET/ (replay it with `replay`).
    """


@main.command("list")
def list_targets():
    """The targets and their invariants."""
    for name in registry.NAMES:
        target = registry.load(name)
        click.echo(f"{name}  (goal {target.goal:,} inputs)\n    " +
                   " ".join(target.invariant.split()) + "\n")


@main.command()
@click.argument("targets", nargs=-1)
@click.option("--seconds", type=click.FloatRange(min=0, max=MAX_SECONDS), default=0.0,
              callback=lambda ctx, param, v: _finite(v, "--seconds"),
              help="Stop each target after this long (0: no limit; a fraction rounds up to a second).")
@click.option("--runs", type=click.IntRange(min=0, max=2**31 - 1), default=0,
              help="Stop each target after this many inputs (0: no limit; --goal uses the target's).")
@click.option("--goal", is_flag=True, help="Run each target to its goal (the README's figures).")
@click.option("--native", is_flag=True,
              help="Use the coverage-instrumented Cython build (make it with `build` first).")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path),
              default=ROOT / "build" / "fuzz", show_default=True,
              help="Corpora, crashes and logs go here.")
@click.option("--max-len", type=click.IntRange(min=1),
              help="Longest input libFuzzer makes (default: the target's, 4096 for most).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Append one JSON line per target here (results/fuzz.jsonl, say).")
def run(targets, seconds, runs, goal, native, work, max_len, out):
    """Fuzz TARGETS (all when none is named) one after another."""
    names = list(targets) or registry.NAMES
    unknown = [n for n in names if n not in registry.NAMES]
    if unknown:
        raise click.UsageError(f"no target {unknown[0]!r}; `list` shows them")
    if not (seconds or runs or goal):
        raise click.UsageError("say how long: --seconds, --runs or --goal")
    if native and not (NATIVE / "fastpath").is_dir():
        raise click.UsageError(f"no instrumented build in {NATIVE}: run `build` first")
    # Where the run writes is checked before hours of fuzzing, not after.
    for what, path in (("--work", work), ("--out", out)):
        try:
            if path is work:
                work.mkdir(parents=True, exist_ok=True)
            elif path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                open(path, "a").close()
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
            raise click.UsageError(f"{what} {path}: {exc.strerror or exc}{where}") from None
    failed = False
    interrupts = SignalInterrupt(signal.SIGTERM)  # a service stop ends the run as Ctrl-C does
    targets = [registry.load(name) for name in names]  # all at once: the code this run started with
    for target in targets:
        name = target.name
        limit = target.goal if goal and not runs else runs
        try:
            with one_run_at_a_time(work, name):
                record = run_target(target, work, seconds, limit, native, max_len or target.max_len)
        except KeyboardInterrupt:  # run_target stopped the fuzzer on its way out
            record = None
        if record is None or interrupts.came:  # (came: the fuzzer had already ended)
            click.echo(f"interrupted during {name}", err=True)
            sys.exit(130)
        failed |= bool(record["crashes"]) or record["exit"] != 0
        click.echo(f"{name:18} {record['inputs']:>11,} inputs  {record['inputs_per_second']:>7,}/s  "
                   f"cov {record['coverage_edges']:>5}  ft {record['features']:>6}  "
                   f"corpus {record['corpus']:>5}  {len(record['crashes'])} crashes"
                   + (f"  exit {record['exit']} (see {record['log']})" if record["exit"] else ""))
        for crash in record["crashes"]:
            click.echo(f"    crash: {crash}  (replay: python -m bench.fuzz replay {name} {crash})")
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "a") as f:
                f.write(json.dumps(record) + "\n")
    sys.exit(1 if failed else 0)


@main.command()
@click.argument("target")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def replay(target, files):
    """Run TARGET once on each of FILES, in this process, and show what happens."""
    if target not in registry.NAMES:
        raise click.UsageError(f"no target {target!r}; `list` shows them")
    one_input = registry.load(target).one_input
    bad = 0
    for path in files:
        data = Path(path).read_bytes()
        try:
            one_input(data)
            click.echo(f"{path}: holds ({data!r:.120})")
        except Exception as exc:  # noqa: BLE001 - what a crash is, is the point
            bad += 1
            click.echo(f"{path}: {type(exc).__name__}: {exc}  input {data!r:.200}")
    sys.exit(1 if bad else 0)


@main.command()
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def report(results):
    """RESULTS (run --out's JSON lines) as the Markdown table the README quotes: per target, its
    newest record with and without the instrumented Cython build."""
    newest = {}
    for number, r in _records(results):
        if r["target"] not in registry.NAMES:
            click.echo(f"{results}:{number}: no target {r['target']!r} here (renamed or removed); "
                       "left out", err=True)
            continue
        newest[(r["target"], r["native_coverage"])] = r
    if not newest:
        raise click.ClickException(f"no fuzz records in {results} (`run --out` writes them)")
    click.echo("| target | build | inputs | inputs/s | coverage (edges / features) | corpus | crashes | commit |")
    click.echo("|---|---|---:|---:|---:|---:|---:|---|")
    for name in registry.NAMES:
        for native in (False, True):
            r = newest.get((name, native))
            if r is None:
                continue
            build = "Cython, instrumented + ASan" if native else {
                "cython": "Cython", "python": "pure Python"}[r["implementation"]] + ", Python coverage"
            click.echo(f"| {name} | {build} | {r['inputs']:,} | {r['inputs_per_second']:,} | "
                       f"{r['coverage_edges']:,} / {r['features']:,} | {r['corpus']:,} | "
                       f"{len(r['crashes'])} | `{r['commit']}` |")


# what `report` reads of a record, and its type
RECORD = {"target": str, "commit": str, "implementation": ("cython", "python"), "native_coverage": bool,
          "inputs": int, "inputs_per_second": int, "coverage_edges": int, "features": int,
          "corpus": int, "crashes": list}


def _records(path: Path):
    """(line number, record) for each non-blank line of a records file; one line for a file that
    is no records file."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise click.ClickException(f"{path}: not text (not run --out's JSON lines)") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            raise click.ClickException(f"{path}:{number}: not JSON (not run --out's JSON lines)") from None
        if not isinstance(r, dict) or r.get("kind") != "fuzz":
            raise click.ClickException(f"{path}:{number}: not a fuzz record (no \"kind\": \"fuzz\")")
        for key, kind in RECORD.items():
            value = r.get(key)
            good = value in kind if isinstance(kind, tuple) else (
                isinstance(value, kind) and not (kind is int and isinstance(value, bool)))
            if not good:
                raise click.ClickException(f"{path}:{number}: a fuzz record with a bad {key!r}: {value!r:.40}")
        yield number, r


@main.command("coverage")
@click.argument("targets", nargs=-1)
@click.option("--work", type=click.Path(file_okay=False, path_type=Path),
              default=ROOT / "build" / "fuzz", show_default=True, help="Where `run` kept the corpora.")
def coverage_command(targets, work):
    """Replay each target's corpus under coverage.py: the share of the lines of the target's
    Python modules that the inputs the fuzzer kept reach (a Markdown table), with the Cython
    build (as the runs fuzz) and again with every pure-Python twin (PELOTARI_PURE_PYTHON=1: the
    twins' lines, which code compiled in their place leaves unrun)."""
    names = list(targets) or registry.NAMES
    unknown = [n for n in names if n not in registry.NAMES]
    if unknown:
        raise click.UsageError(f"no target {unknown[0]!r}; `list` shows them")
    missing = [n for n in names if not (work / "corpus" / n).is_dir()]
    if missing:
        raise click.UsageError(f"no corpus for {missing[0]} in {work}: `run` it first")
    click.echo("| target | module | lines reached | with the pure-Python twins |")
    click.echo("|---|---|---:|---:|")
    for name in names:
        corpus = work / "corpus" / name
        shares = [_replay(name, corpus, pure) for pure in (False, True)]
        for module, share in shares[0].items():
            click.echo(f"| {name} | `{module}` | {share:.0f} % | {shares[1].get(module, 0.0):.0f} % |")


def _replay(name: str, corpus: Path, pure: bool) -> dict:
    """{module: % of its lines reached} for one target's corpus, in a fresh interpreter."""
    env = dict(os.environ)
    env.pop("PELOTARI_PURE_PYTHON", None)
    if pure:
        env["PELOTARI_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-m", "bench.fuzz.cover", name, str(corpus)], cwd=ROOT, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise click.ClickException(f"{name}: {(out.stderr.strip().splitlines() or ['failed'])[-1]}")
    return json.loads(out.stdout)


@main.command()
def build():
    """Build the Cython extensions with clang's coverage instrumentation and ASan into
    build/fuzz/native (clang-14: `apt-get install clang-14`; `tools/run fuzz` installs it)."""
    try:
        import Cython  # noqa: F401  (setup.py cythonizes; pip's isolated build env had it, not the venv)
    except ImportError:
        raise click.ClickException("no Cython in this environment: pip install 'cython>=3.0.10' "
                                   "(or reinstall with `pip install -e '.[test]'`)") from None
    clang = shutil.which("clang-14") or shutil.which("clang")
    if clang is None:
        raise click.ClickException("no clang: apt-get install clang-14")
    flags = "-fsanitize=address,fuzzer-no-link -g -O1 -fno-omit-frame-pointer"
    env = dict(os.environ, CC=clang, LDSHARED=f"{clang} -shared", CFLAGS=flags, LDFLAGS=flags)
    temp = ROOT / "build" / "fuzz" / "temp"
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(NATIVE),
                           "--build-temp", str(temp), "--force"], cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        raise click.ClickException(f"the instrumented build failed (setup.py exit {done.returncode}; "
                                   "its output is above)")
    for py in (ROOT / "fastpath").glob("*.py"):  # the package's Python half: twins, tables
        shutil.copy2(py, NATIVE / "fastpath" / py.name)
    click.echo(f"instrumented build in {NATIVE}")


if __name__ == "__main__":
    main()
