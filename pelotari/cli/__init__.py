"""The `pelotari` command: the front door for every part of the toolkit.

Subcommands import what they need when they run, so `pelotari --help` stays fast and never
imports scapy or Spark.
"""
import click

from pelotari import __version__
from pelotari.cli.common import PelotariGroup


@click.group(cls=PelotariGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="pelotari")
def main():
    """pelotari: fast messaging between machines on one network.

    The fyrehose backbone is a sequenced UDP pub/sub hub: publishers PUSH messages, the
    backbone numbers them and DELIVERs each to every subscriber, and subscribers repair gaps
    from each other. Start with `pelotari demo`, then run `pelotari backbone`, `pelotari sub`
    and `pelotari pub` in three terminals.
    """
    from pelotari.cli.service import ensure_standard_fds

    ensure_standard_fds()  # a command started with stdin/stdout/stderr closed still runs


from pelotari.cli import fyrehose as _fyrehose  # noqa: E402,F401  (registers commands)
from pelotari.cli import ready as _ready  # noqa: E402,F401  (pelotari wait)
from pelotari.cli import demo as _demo  # noqa: E402,F401
from pelotari.cli import bench as _bench  # noqa: E402,F401
from pelotari.cli import trend as _trend  # noqa: E402,F401
from pelotari.cli import scapy_tools as _scapy_tools  # noqa: E402,F401
from pelotari.cli import prototari as _prototari  # noqa: E402,F401
from pelotari.cli import lan_demo as _lan_demo  # noqa: E402,F401
from pelotari.cli import cluster as _cluster  # noqa: E402,F401
from pelotari.cli import bully as _bully  # noqa: E402,F401
from pelotari.cli import potato as _potato  # noqa: E402,F401
from pelotari.cli import swarm as _swarm  # noqa: E402,F401
