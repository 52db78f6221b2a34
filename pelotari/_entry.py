"""The `pelotari` command's entry point: Ctrl-C while the CLI is still being imported (the
first tenth of a second or so) ends it with one line and status 130, not an import traceback."""
import sys


def run():
    """Import the CLI and run it."""
    try:
        from pelotari.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    return main()
