from typing import Any, List, Optional, Tuple

MESSAGE: int
LOST: int
RESET: int
ACCEPTED: int
DUPLICATE: int
RESYNCED: int

class Journal:
    capacity: int
    count: int
    def __init__(self, capacity: int = ...) -> None: ...
    def __len__(self) -> int: ...
    def store(self, seq: int, data: Any) -> None: ...
    def get(self, seq: int) -> Optional[Any]: ...
    def serve(self, from_seq: int, to_seq: int, limit: int = ...) -> List[bytes]: ...

class GapTracker:
    started: bool
    max_gap: int
    max_held: int
    max_request_range: int
    request_delay: float
    backoff: float
    retries: int
    duplicates: int
    resets: int
    lost_messages: int
    next_sequence: Optional[int]
    highest_sequence: Optional[int]
    held_count: int
    def __init__(self, *, max_gap: int = ..., max_held: int = ..., max_request_range: int = ...,
                 request_delay: float = ..., backoff: float = ..., retries: int = ...) -> None: ...
    def offer(self, seq: int, data: Any, now: float) -> int: ...
    def ready(self) -> List[Tuple[int, Any, Any]]: ...
    def due(self, now: float) -> List[Tuple[int, int]]: ...
    def next_deadline(self) -> Optional[float]: ...
    def open_gaps(self) -> List[Tuple[int, int]]: ...
    def lose_first_gap(self) -> None: ...
