"""Build the fastpath Cython extensions (PEP 517 via setuptools; see pyproject.toml)."""
import os

from setuptools import Extension, setup

# PELOTARI_DEBUG=1 builds with line tracing (for coverage/profilers) and no optimisation.
DEBUG = os.environ.get("PELOTARI_DEBUG") == "1"
MODULES = ["wire", "codec", "batchio", "backbone", "journal", "loadgen", "swarmmac", "swarmtable",
           "swarmpath", "swarmload"]
# swarm's MACs: OpenSSL's SHA-256 through its low-level API (libssl-dev; tools/run installs it)
LIBRARIES = {name: ["crypto"] for name in ("swarmmac", "swarmpath", "swarmload")}
MACROS = {name: [("OPENSSL_SUPPRESS_DEPRECATED", "1")] for name in LIBRARIES}
# Explicit, so nothing stray (tests, bench) is installed; tests/test_packaging.py keeps it whole.
PACKAGES = ["fastpath", "pelotari", "pelotari.analysis", "pelotari.harness", "pelotari.bully",
            "pelotari.cli", "pelotari.fyrehose", "pelotari.layers", "pelotari.potato",
            "pelotari.prototari", "pelotari.swarm"]


def write_wire_constants():
    """fastpath/packets.pxi from the wire table (Cython needs its constants at compile time)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_packets", "fastpath/packets.py")
    packets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packets)
    text = packets.cython_constants()
    path = "fastpath/packets.pxi"
    if not os.path.exists(path) or open(path).read() != text:  # unchanged: no rebuild
        with open(path, "w") as f:
            f.write(text)


def extensions():
    from Cython.Build import cythonize

    write_wire_constants()

    macros = [("_GNU_SOURCE", "1")]
    directives = {"language_level": "3"}
    if DEBUG:
        macros += [("CYTHON_TRACE_NOGIL", "1")]
        directives["linetrace"] = True
    exts = [
        Extension(f"fastpath.{name}", [f"fastpath/{name}.pyx"],
                  define_macros=macros + MACROS.get(name, []),
                  libraries=LIBRARIES.get(name, []),
                  extra_compile_args=["-O0", "-g"] if DEBUG else ["-O2"])
        for name in MODULES
    ]
    return cythonize(exts, compiler_directives=directives, quiet=True)


setup(
    packages=PACKAGES,
    package_data={"fastpath": ["*.pxd", "*.pxi", "*.pyi", "py.typed", "include/*.h"],
                  "pelotari.analysis": ["log4j2.properties"],
                  "pelotari.potato": ["web/*.html", "web/*.js", "web/*.css"]},
    exclude_package_data={"fastpath": ["*.c"]},
    include_package_data=False,
    ext_modules=extensions(),
)
