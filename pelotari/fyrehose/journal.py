"""The client's journal and gap tracker: fastpath.journal, or its twin fastpath.refjournal."""
from fastpath.implementation import compiled

if compiled("journal") is None:
    from fastpath.refjournal import *  # noqa: F401,F403
    IMPLEMENTATION = "python"
else:
    from fastpath.journal import *  # noqa: F401,F403
    IMPLEMENTATION = "cython"
