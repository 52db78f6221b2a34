"""pelotari's hot paths in Cython: codec, batch I/O, backbone loop, client journal; ref*.py are
their pure-Python twins (implementation.py chooses)."""
