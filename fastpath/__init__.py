"""pelotari's hot paths in Cython: codec, batch I/O, backbone loop, client journal."""
