"""``RecordingProxy``: an HTTP pass-through between tandem and a model server that keeps what passed.

Every request is forwarded as it came (method, path, body, the ``Authorization`` header) and the
answer relayed as it comes (a streamed one chunk by chunk, so tandem's deltas stream as from the
server). Each is kept as an ``Exchange``: the request body, the status, and for a chat completion
its usage, or, for a stream, how many chunks brought text or tool calls and what they said.

For a streamed chat completion (the server sends no usage with it) the proxy asks the server for
its own count of the same request once the stream has been relayed (``server_usage``): the
prompt's tokens from the same body unstreamed with ``max_tokens: 1`` (the server reuses the prompt
it just read), and the reply's from its tokenizer (``POST /extras/tokenize/count`` of the text
streamed). Asking for the whole reply again would not do: the server's replies to one prompt
differ from one try to the next, ``temperature: 0`` or not (its prompt cache changes the sums).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["Exchange", "RecordingProxy"]


@dataclass
class Exchange:
    """One request through the proxy and the server's answer."""

    method: str
    path: str
    body: dict[str, Any]
    status: int = 0
    arrived: float = field(default_factory=time.time)
    """When the request reached the proxy (``time.time()``)."""
    usage: dict[str, int] | None = None
    """The usage of a chat completion's answer (streamed: any chunk's; ``None`` when none came)."""
    streamed: bool = False
    chunks: int = 0
    """Streamed chunks that brought text or tool-call pieces."""
    text: str = ""
    """The streamed text (content), or the error body of a failed request."""
    finish_reason: str | None = None
    """The stream's ``finish_reason`` (``None``: no chunk carried one)."""
    server_usage: dict[str, int] | None = None
    """For a stream: the server's count of the same request, unstreamed (see the module docstring)."""
    broken: str = ""
    """How the connection broke before the whole answer was relayed (``""``: it did not)."""
    finished: float = 0.0
    """When the answer had been relayed, or the connection broke (``time.time()``; 0: not yet)."""

    def __str__(self) -> str:
        how = f"streamed -> {self.status} ({self.chunks} chunks)" if self.streamed else f"-> {self.status}"
        return f"{self.method} {self.path} {how} {self.broken}".rstrip()

    @property
    def chat(self) -> bool:
        return self.path.rstrip("/").endswith("/chat/completions")

    def mentions(self, text: str) -> bool:
        """Whether any message of the request holds ``text``."""
        return any(text in str(m.get("content") or "") for m in self.body.get("messages") or ())


@dataclass
class RecordingProxy:
    """A proxy to ``upstream`` (the server's root, ``http://127.0.0.1:PORT``) on a free loopback
    port; ``url`` is the API base tandem is given (``…/v1``)."""

    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)
    on_chunk: Callable[[Exchange, bytes], None] | None = None
    """Called with each piece of an answer right after it was relayed to tandem (a test that
    stops or kills the server mid-stream hooks it here); ``upstream`` may be changed meanwhile."""
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _httpd: ThreadingHTTPServer | None = None
    _open = 0

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> RecordingProxy:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="recording-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def of(self, tag: str) -> list[Exchange]:
        """The chat completions whose messages hold ``tag``, in the order they came."""
        with self._lock:
            return [e for e in self.exchanges if e.chat and e.mentions(tag)]

    def keep(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def opened(self) -> None:
        with self._lock:
            self._open += 1

    def closed(self) -> None:
        with self._lock:
            self._open -= 1
            self._lock.notify_all()

    def wait_idle(self, timeout: float) -> None:
        """Wait until no request is being relayed or counted (``TimeoutError`` after ``timeout``)."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._open == 0, timeout):
                raise TimeoutError(f"the proxy still relays {self._open} request(s) after {timeout:g} s")


def _handler(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    # A new connection to the server for each request: a kept-alive one can be closed by the
    # server (uvicorn, after 5 idle seconds) just as the proxy sends on it, and that broken
    # request would be the proxy's doing, not tandem's.
    client = httpx.Client(
        timeout=httpx.Timeout(600.0, connect=10.0), limits=httpx.Limits(max_keepalive_connections=0)
    )

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._forward(b"")

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, raw: bytes) -> None:
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {"_raw": raw.decode("utf-8", "replace")}
            exchange = Exchange(self.command, self.path, body if isinstance(body, dict) else {"_raw": body})
            exchange.streamed = bool(exchange.body.get("stream"))
            kept = ("content-type", "authorization", "accept")
            headers = {k: v for k, v in self.headers.items() if k.lower() in kept}
            url = proxy.upstream + self.path
            proxy.opened()
            try:
                self._relay(
                    client.send(
                        client.build_request(self.command, url, content=raw, headers=headers), stream=True
                    ),
                    exchange,
                )
            except (httpx.HTTPError, OSError) as exc:  # the server, or tandem, broke the connection
                exchange.broken = f"{type(exc).__name__}: {exc}"
                self.close_connection = True
            else:
                exchange.finished = time.time()
                if exchange.chat and exchange.streamed and exchange.status == 200 and exchange.chunks:
                    exchange.server_usage = _server_usage(client, url, exchange, headers)
            finally:
                exchange.finished = exchange.finished or time.time()
                proxy.keep(exchange)
                proxy.closed()

        def _relay(self, answer: httpx.Response, exchange: Exchange) -> None:
            """Send ``answer`` on as it comes (chunked), then read what it said into ``exchange``."""
            received = bytearray()
            try:
                exchange.status = answer.status_code
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in answer.iter_bytes():  # (decoded: the answer goes on without its encoding)
                    received += piece
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                    if proxy.on_chunk is not None:
                        proxy.on_chunk(exchange, piece)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            finally:
                answer.close()
                _read(exchange, bytes(received))

    return Handler


def _read(exchange: Exchange, received: bytes) -> None:
    """Fill in what the answer said (usage, streamed chunks and text, an error's body)."""
    text = received.decode("utf-8", "replace")
    if exchange.status >= 400 or not exchange.chat:
        exchange.text = text[:2000]
        return
    if not exchange.streamed:
        try:
            exchange.usage = json.loads(text).get("usage")
        except ValueError:
            exchange.text = text[:2000]
        return
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:
            continue
        if chunk.get("usage"):
            exchange.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            exchange.finish_reason = choice.get("finish_reason") or exchange.finish_reason
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("tool_calls"):
                exchange.chunks += 1
                exchange.text += delta.get("content") or ""


def _server_usage(
    client: httpx.Client, url: str, exchange: Exchange, headers: dict[str, str]
) -> dict[str, int] | None:
    """The server's count of a streamed request (see the module docstring)."""
    twin = {k: v for k, v in exchange.body.items() if k not in ("stream", "stream_options")}
    answer = client.post(url, json={**twin, "max_tokens": 1}, headers=headers)
    root = url.split("/v1/", 1)[0]
    counted = client.post(f"{root}/extras/tokenize/count", json={"input": exchange.text}, headers=headers)
    if answer.status_code != 200 or counted.status_code != 200:
        exchange.broken = f"the server's count: HTTP {answer.status_code}, {counted.status_code}"
        return None
    return {
        "prompt_tokens": answer.json()["usage"]["prompt_tokens"],
        "completion_tokens": counted.json()["count"],
    }
