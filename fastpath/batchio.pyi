import socket
from typing import Iterable, List, Tuple, Union

Address = Tuple[str, int]
Buffer = Union[bytes, bytearray, memoryview]

def set_buffers(sock: socket.socket, size: int, force: bool = ...) -> None: ...
def enable_gro(sock: socket.socket) -> None: ...

class RecvBatch:
    capacity: int
    slot_size: int
    count: int
    def __init__(self, capacity: int = ..., slot_size: int = ..., control: bool = ...) -> None: ...
    def recv(self, sock: socket.socket) -> List[Tuple[bytes, Address]]: ...
    def truncated_at(self, i: int) -> bool: ...

class SendBatch:
    capacity: int
    count: int
    sent: int
    bytes_sent: int
    errors: int
    would_block: int
    max_wait_ms: int
    def __init__(self, capacity: int = ..., max_wait_ms: int = ...) -> None: ...
    def send(self, sock: socket.socket, datagrams: Iterable[Tuple[Buffer, Address]]) -> int: ...
    def fan_out(self, sock: socket.socket, header: Buffer, payload: Buffer, addrs: Iterable[Address]) -> int: ...
