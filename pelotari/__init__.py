"""pelotari: fast messaging between machines on one network."""
__version__ = "0.1.0"
