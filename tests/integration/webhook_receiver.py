"""A webhook receiver for the tests: an HTTP server on 127.0.0.1 that records every POST."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CLOSE = -1
"""What an ``answer`` returns to drop the connection without a reply."""
Answer = Callable[[dict[str, Any]], "int | tuple[int, dict[str, str]]"]


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST (path, headers, raw body) and answers
    with what ``answer(request)`` says: a status, a status and headers, or ``CLOSE``."""

    def __init__(self, answer: Answer = lambda _: 204) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                got = {"path": self.path, "headers": dict(self.headers.items()), "body": body}
                with receiver._lock:
                    receiver.requests.append(got)
                said = receiver.answer(got)
                status, headers = said if isinstance(said, tuple) else (said, {})
                if status == CLOSE:
                    self.close_connection = True
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/tandem"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, job_id: str, event: str | None = None) -> list[dict[str, Any]]:
        """The requests of one job's deliveries (of ``event``, if given), in order."""
        with self._lock:
            seen = list(self.requests)
        bodies = [(r, json.loads(r["body"])) for r in seen]
        return [r for r, b in bodies if b["job_id"] == job_id and event in (None, b["event"])]


__all__ = ["CLOSE", "Answer", "Receiver"]
