"""``SlowLink``: a TCP proxy that delivers every byte ``delay`` seconds late, both ways, in order.

A worker whose ``TANDEM_REDIS_URL`` points through it takes ``2 * delay`` longer for every Redis
round trip than the rest of the fleet: its steps stretch out in time, so what other workers do
between two of its Redis commands can be arranged by a test instead of hoped for.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time


class SlowLink:
    """Listens on ``127.0.0.1`` (``port`` once started) and forwards to ``target``."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def start(self) -> SlowLink:
        """Accept connections (each gets its own forwarding threads) until ``stop``."""
        threading.Thread(target=self._accept, name="slow-link-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listener and every connection."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                return
            with self._lock:
                self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()
                threading.Thread(target=self._read, args=(src, chunks), daemon=True).start()
                threading.Thread(target=self._write, args=(dst, chunks), daemon=True).start()

    def _read(self, src: socket.socket, chunks: queue.SimpleQueue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            chunks.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write(self, dst: socket.socket, chunks: queue.SimpleQueue[tuple[float, bytes]]) -> None:
        while True:
            due, data = chunks.get()
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return
