"""`python -m pelotari` is the `pelotari` command."""
from pelotari._entry import run

if __name__ == "__main__":
    run()
