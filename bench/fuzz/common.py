"""What every fuzz target shares: the Target record, the stateful script reader, invariants."""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, List, Sequence


@dataclasses.dataclass(frozen=True)
class Target:
    """One harness: `one_input(bytes)` raises only when an invariant breaks."""

    name: str
    one_input: Callable[[bytes], None]
    seeds: Callable[[], Iterable[bytes]]
    invariant: str
    modules: Sequence[str]  # what atheris instruments (Python modules; Cython via the build)
    goal: int = 1_000_000  # inputs to execute for the README's figures
    max_len: int = 4096  # the longest input libFuzzer makes
    dictionary: Sequence[bytes] = ()  # tokens libFuzzer splices in (-dict): a text format's words


class Broken(AssertionError):
    """An invariant did not hold (never raised for input the target rightly refuses)."""


def check(condition: bool, what: str) -> None:
    """Raise Broken(what) unless condition."""
    if not condition:
        raise Broken(what)


class Script:
    """A fuzz input read as a sequence of choices (atheris's FuzzedDataProvider, without
    atheris: the same bytes replay the same steps in a plain test)."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def __bool__(self) -> bool:
        return self.pos < len(self.data)

    def byte(self) -> int:
        """One byte (0 once the input is used up)."""
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def below(self, n: int) -> int:
        """An integer in [0, n) from one or two bytes."""
        if n <= 256:
            return self.byte() % n
        return (self.byte() << 8 | self.byte()) % n

    def pick(self, options: Sequence):
        """One of options."""
        return options[self.below(len(options))]

    def take(self, n: int) -> bytes:
        """Up to n bytes."""
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out

    def blob(self, limit: int = 255) -> bytes:
        """A length byte (capped at limit), then that many bytes."""
        return self.take(min(self.byte(), limit))


def tick(core, now: float) -> None:
    """Run a sans-IO core's timer if it is due at now."""
    due = core.get_timer()
    if due is not None and now >= due:
        core.handle_timer(now)


def mutate(script: Script, wire: bytes) -> bytes:
    """wire with a few bytes overwritten, cut or extended, as the script says."""
    out = bytearray(wire)
    for _ in range(script.below(4)):
        kind = script.below(4)
        if kind == 0 and out:
            out[script.below(len(out))] = script.byte()
        elif kind == 1:
            del out[script.below(len(out) + 1):]
        elif kind == 2:
            out += script.blob(64)
        elif out:
            out[script.below(len(out))] ^= 1 << script.below(8)
    return bytes(out)


def framed(seeds: Iterable[bytes], prefix: bytes = b"") -> List[bytes]:
    """Seeds for a Script-driven target: each wire message as a length-prefixed blob."""
    return [prefix + bytes([min(len(s), 255)]) + s[:255] for s in seeds]
