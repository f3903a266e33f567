"""A counting, fault-injecting HTTP proxy in front of ``tandem api``, for the HTTP client tests.

It stands where a load balancer or a reverse proxy would, on a free loopback port: every request a
client sends is recorded (method, path as sent, headers, body) before anything else happens, so a
test can count what a client sent, not what it says it sent. Each request gets a connection of its
own to the API (the proxy asks for ``Connection: close``), so one request is one record.

Rules pick a fault for the requests they match, a given number of times:

- ``answer``: the proxy answers itself (a status, a body, headers) and the API sees nothing;
- ``drop``: the connection is closed without any answer;
- ``swallow``: the request reaches the API, but its answer never reaches the client (a write that
  timed out after it was done), the connection held open until the client gives up;
- ``cut``: an event stream is forwarded up to its ``events``-th event, then cut mid-frame;
- ``stall``: an event stream is forwarded up to its ``events``-th event, then nothing more
  (heartbeats included), the connection held open;
- ``trickle``: the answer is forwarded one byte per write (frames, lines and UTF-8 characters
  split across reads);
- ``truncate``: the whole answer is read from the API, its head and the first half of its body
  forwarded, then the connection is closed (a body short of its ``Content-Length``, a stream cut).

``prefix`` mounts the API under a path, as a reverse proxy does (``/tandem/v1/jobs`` reaches the
API as ``/v1/jobs``); any other path gets the proxy's own HTML 404.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus


@dataclass
class Rule:
    """A fault for the requests whose method is ``method`` and whose path (without the query, after
    the prefix) matches ``path`` in full; applied ``times`` times (``-1``: always)."""

    method: str
    path: str
    action: str
    times: int = 1
    status: int = 503
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    events: int = 0


@dataclass
class Seen:
    """One request as the client sent it, and what the proxy did with it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    action: str
    upstream_status: int | None = None


_DATA = b"\ndata: "


class FaultProxy:
    """The proxy, serving on a thread of its own until ``close``."""

    def __init__(self, upstream_port: int, prefix: str = "") -> None:
        self.upstream_port = upstream_port
        self.prefix = prefix.rstrip("/")
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)
        self._thread.start()

    def add(self, rule: Rule) -> Rule:
        with self._changed:
            self.rules.append(rule)
        return rule

    def requests(self, method: str, path: str) -> list[Seen]:
        """The requests seen whose path (without query and prefix) matches ``path`` in full."""
        with self._changed:
            return [
                s for s in self.seen if s.method == method and re.fullmatch(path, self._route(s.path) or "")
            ]

    def wait_for(self, check: Callable[[], bool], timeout: float = 120.0) -> None:
        """Wait until ``check()`` holds, woken by each request the proxy sees or finishes."""
        with self._changed:
            if not self._changed.wait_for(check, timeout):
                raise AssertionError(
                    f"the proxy did not see what the test waits for in {timeout} s: {self.seen}"
                )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    # -- serving ---------------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _route(self, target: str) -> str | None:
        path = target.split("?", 1)[0]
        if not self.prefix:
            return path
        if path == self.prefix or path.startswith(self.prefix + "/"):
            return path[len(self.prefix) :] or "/"
        return None

    def _rule_for(self, method: str, path: str) -> Rule | None:
        for rule in self.rules:
            if rule.times != 0 and rule.method == method and re.fullmatch(rule.path, path):
                if rule.times > 0:
                    rule.times -= 1
                return rule
        return None

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._exchange(conn)
        except OSError:
            pass

    def _exchange(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        request_line = reader.readline()
        if not request_line:
            return
        method, target, _version = request_line.decode("latin-1").split(" ", 2)
        headers: list[tuple[str, str]] = []
        while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        lower = {name.lower(): value for name, value in headers}
        body = reader.read(int(lower.get("content-length", "0") or 0))
        route = self._route(target)
        with self._changed:
            rule = None if route is None else self._rule_for(method, route)
            seen = Seen(method, target, lower, body, "forward" if rule is None else rule.action)
            self.seen.append(seen)
            self._changed.notify_all()
        if route is None:
            _answer(conn, 404, b"<html><body>404 Not Found</body></html>", "text/html", {})
        elif rule is not None and rule.action == "answer":
            _answer(conn, rule.status, rule.body, rule.content_type, rule.headers)
        elif rule is not None and rule.action == "drop":
            conn.shutdown(socket.SHUT_RDWR)
        else:
            query = target[len(target.split("?", 1)[0]) :]
            self._forward(conn, method, route + query, headers, body, rule, seen)

    def _forward(
        self,
        conn: socket.socket,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
        rule: Rule | None,
        seen: Seen,
    ) -> None:
        head = [f"{method} {target} HTTP/1.1"]
        head += [f"{n}: {v}" for n, v in headers if n.lower() not in ("connection", "keep-alive")]
        head.append("Connection: close")
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=None) as upstream:
            upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            received = bytearray()
            sent = 0
            while True:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                received += chunk
                if seen.upstream_status is None and b"\r\n" in received:
                    with self._changed:
                        seen.upstream_status = int(received.split(b" ", 2)[1])
                        self._changed.notify_all()
                if rule is not None and rule.action in ("swallow", "truncate"):
                    continue
                if rule is not None and rule.action == "trickle":
                    for at in range(sent, len(received)):
                        conn.sendall(received[at : at + 1])
                    sent = len(received)
                    continue
                cut = _nth(received, _DATA, rule.events) if rule is not None else -1  # cut or stall
                if cut >= 0:  # the stream's (events + 1)-th event starts here: forward up to it, no further
                    conn.sendall(bytes(received[sent:cut]))
                    if rule is not None and rule.action == "cut":
                        return
                    _hold(conn, self._stop)  # stall: silent until the client hangs up
                    return
                conn.sendall(bytes(received[sent:]))
                sent = len(received)
            if rule is not None and rule.action == "swallow":
                _hold(conn, self._stop)
            elif rule is not None and rule.action == "truncate":
                body_at = received.find(b"\r\n\r\n") + 4
                conn.sendall(bytes(received[: body_at + (len(received) - body_at) // 2]))


def _nth(data: bytearray, needle: bytes, n: int) -> int:
    """Where the ``n + 1``-th ``needle`` starts in ``data``, or -1."""
    at = -1
    for _ in range(n + 1):
        at = data.find(needle, at + 1)
        if at < 0:
            return -1
    return at


def _hold(conn: socket.socket, stop: threading.Event) -> None:
    """Keep ``conn`` open, answering nothing, until the client closes it or the proxy stops."""
    conn.settimeout(0.2)
    while not stop.is_set():
        try:
            if not conn.recv(65536):
                return
        except TimeoutError:
            continue


def _answer(
    conn: socket.socket, status: int, body: bytes, content_type: str, headers: dict[str, str]
) -> None:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", f"Content-Type: {content_type}"]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{n}: {v}" for n, v in headers.items()]
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
