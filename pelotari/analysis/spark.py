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
        raise RuntimeError("pelotari trend needs PySpark: pip install 'pelotari[analysis]'") from None
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
