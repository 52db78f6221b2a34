"""A quiet SparkSession bound to loopback (local[*] by default, any master by option)."""
import os
import pathlib
import re
import sys
import threading

LOG4J = pathlib.Path(__file__).with_name("log4j2.properties")

# Lines the JVM and Spark print at every start that tell the user nothing; errors still pass.
STARTUP_NOISE = re.compile(
    r"^(WARNING: Using incubator modules|Setting default log level to|To adjust logging level"
    r"|Using Spark's default log4j profile|.*WARN NativeCodeLoader)")

_forwarding: list[int] = []  # where _filtered_child_stderr forwards the JVM's lines (fds)
_terminal: int | None = None  # the real stderr, once silence() has taken it away


def silence() -> int:
    """From now on nothing reaches the real stderr: not what any thread of this process writes
    there (PySpark's accumulator server thread prints a traceback when the JVM it serves is
    killed; threading's excepthook, py4j, logging), nor what the JVM and its children write. For
    a way out after an interrupt. Returns a descriptor of the real stderr, for the last line;
    calling it again is harmless (and silences again what was given back meanwhile)."""
    global _terminal
    if _terminal is None:  # fd 2 may be the JVM's filter pipe (Spark still starting)
        _terminal = os.dup(_forwarding[0] if _forwarding else 2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (2, *_forwarding):
            try:
                os.dup2(null, fd)
            except OSError:
                pass
    finally:
        os.close(null)
    return _terminal


def kill_children() -> int:
    """SIGKILL every process this one started (Spark's JVM and its launcher scripts), at once:
    for a way out where asking Spark to stop would wait on it or print its Java stack traces.
    Returns how many there were."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=5)
    return len(children)


def session(master: str = "local[*]", app: str = "pelotari-trend"):
    """Start (or reuse) a SparkSession with no UI, no progress bars and start-up noise dropped."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        from pelotari.analysis import install_hint

        raise RuntimeError("pelotari trend needs the analysis extra (pyspark is not installed): "
                           f"{install_hint()}") from None
    # Loopback only: nothing listens on other interfaces, and no hostname lookup warnings.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    log4j = f"-Dlog4j.configurationFile=file:{LOG4J} -Dlog4j2.configurationFile=file:{LOG4J}"
    # Driver JVM options must be known when the JVM starts, before any builder config applies.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f'--driver-java-options "{log4j}" pyspark-shell')
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.executor.extraJavaOptions", log4j)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "4"))
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    with _filtered_child_stderr():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _filtered_child_stderr:
    """While active, processes started (the JVM) inherit a stderr that drops STARTUP_NOISE and
    forwards everything else to the real stderr for as long as they live."""

    def __enter__(self):
        try:
            self.real = os.dup(2)
        except OSError:
            self.real = None
            return self
        _forwarding.append(self.real)
        read_end, write_end = os.pipe()
        sys.stderr.flush()
        os.dup2(write_end, 2)
        os.close(write_end)
        threading.Thread(target=self._pump, args=(read_end, self.real), daemon=True).start()
        return self

    @staticmethod
    def _pump(read_end: int, real: int) -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                if not STARTUP_NOISE.match(line.decode("utf-8", "replace")):
                    os.write(real, line)

    def __exit__(self, *exc):
        if self.real is not None:
            sys.stderr.flush()
            os.dup2(self.real, 2)  # this process's own stderr is the real one again
