"""`python -m pelotari` is the `pelotari` command."""
from pelotari.cli import main

if __name__ == "__main__":
    main()
