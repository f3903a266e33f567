"""A scripted, local OpenAI-compatible HTTP server for tests and benchmarks.

It speaks just enough of the OpenAI REST API for LiteLLM and the ``openai`` SDK to talk to it:

* ``POST /v1/chat/completions``: a JSON ``chat.completion`` or, when the request says
  ``"stream": true``, server-sent events (``data: {chunk}`` lines ending with ``data: [DONE]``);
* ``GET /v1/models``: the model list (any ``model`` value is accepted in requests anyway);
* with ``tokenize=``, one host's tokenize endpoint (``TOKENIZE``), counting a text's words.

Replies are scripted with ``Reply`` objects::

    from tests.openai_server import OpenAIServer, Reply

    with OpenAIServer([Reply(status=429, headers={"Retry-After": "2"}), Reply("hello")]) as server:
        litellm.completion(model="openai/any", api_base=server.url, api_key="dummy", messages=[...])
        assert len(server.requests) == 2

The script is one of:

* a ``Reply`` or a ``str`` (a content-only reply): every request gets it;
* a list of them, consumed one per chat request in order. When the list is used up the server
  follows ``when_exhausted``: ``"repeat"`` (the default) answers with the last reply again,
  ``"error"`` answers HTTP 400 with an error whose message starts with ``test server script
  exhausted`` (a 400, not a 5xx, so a retrying client fails at once instead of retrying);
* a callable ``(request) -> Reply | str``, called in the handler thread with the recorded
  request (a ``RecordedRequest``: the JSON body as a dict, plus ``.number``).

``delay`` waits in the request's own thread, so a slow reply never holds up concurrent ones
(the server is a ``ThreadingHTTPServer``; connections are HTTP/1.1 keep-alive, streams use
chunked transfer encoding).

Run it as a separate process (benchmarks, integration tests)::

    python -m tests.openai_server --port 0 --latency 0.5 --reply "The answer is 4."
    python -m tests.openai_server --script-file replies.json

It prints ``listening on http://127.0.0.1:PORT/v1`` on its first stdout line, then serves until
SIGINT or SIGTERM. The script file format is described in ``load_script_file``.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx

__all__ = ["OpenAIServer", "RecordedRequest", "Reply", "load_script_file"]

AUTO: Literal["auto"] = "auto"

_STATUS_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Bad request"),
    401: ("authentication_error", "Incorrect API key provided"),
    403: ("permission_error", "You are not allowed to use this model"),
    404: ("not_found_error", "The model does not exist"),
    408: ("timeout_error", "Request timed out"),
    409: ("conflict_error", "Conflict"),
    422: ("invalid_request_error", "Unprocessable entity"),
    429: ("rate_limit_error", "Rate limit reached, please retry later"),
    500: ("server_error", "The server had an error while processing your request"),
    502: ("server_error", "Bad gateway"),
    503: ("server_error", "The engine is currently overloaded, please try again later"),
    504: ("server_error", "Gateway timeout"),
}


@dataclass
class Reply:
    """One scripted answer to a chat completion request.

    A ``status`` other than 200 answers with an OpenAI-style error body
    ``{"error": {"message", "type", "param", "code"}}``; ``error`` overrides the message.
    ``headers`` are sent with any status (``{"Retry-After": "3"}``).

    ``usage`` is ``"auto"`` (word counts of the request's messages and of the reply), an explicit
    mapping (``prompt_tokens``, ``completion_tokens``, ``total_tokens``), or ``None`` to send
    no usage at all. In a stream, usage is sent in a last chunk with empty ``choices``, only when
    the request asked for it with ``stream_options: {"include_usage": true}`` (as OpenAI does).

    ``tool_calls`` entries are ``{"id", "name", "arguments"}`` (``id`` optional, ``arguments`` a
    JSON string or a dict); they become OpenAI ``tool_calls`` of ``type: function``. In a stream
    each call is sent as a first delta (index, id, name) followed by argument fragments.

    ``reasoning_content`` is reasoning the provider separated from the answer; it is sent in the
    message (or delta) field named ``reasoning_field`` (vLLM before 0.10 and DeepSeek use
    ``reasoning_content``, newer vLLM uses ``reasoning``).

    Streaming: text is cut into pieces of ``chunk_size`` characters (``None``: the server's
    default); ``content_chunks`` / ``reasoning_chunks`` give the exact pieces instead (their
    concatenation is the text sent). ``chunk_delay`` waits between chunks.

    ``disconnect=True`` closes the connection without answering (a connection error for the
    client); ``break_after=N`` (streams only) closes it after ``N`` chunks, mid-stream.
    ``delay`` waits that many seconds before answering.

    ``body`` (a string) is sent as the whole answer instead, exactly as given, with ``status`` and
    the ``content_type`` (to a streamed request too): an HTML page from a proxy, a JSON answer
    cut short, an empty body, JSON that is not a chat completion, a broken event stream.
    ``Reply.malformed(kind)`` makes the usual ones.
    """

    content: str | None = ""
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    usage: Mapping[str, int] | Literal["auto"] | None = AUTO
    error: str | None = None
    finish_reason: str | None = None
    reasoning_field: str = "reasoning_content"
    chunk_size: int | None = None
    content_chunks: list[str] | None = None
    reasoning_chunks: list[str] | None = None
    chunk_delay: float = 0.0
    disconnect: bool = False
    break_after: int | None = None
    body: str | None = None
    content_type: str = "application/json"

    @classmethod
    def malformed(cls, kind: str) -> Reply:
        """A 200 answer that is no chat completion; ``kind`` is one of ``MALFORMED``."""
        if kind not in MALFORMED:
            raise ValueError(f"unknown malformed reply {kind!r}; known: {sorted(MALFORMED)!r}")
        body, content_type = MALFORMED[kind]
        return cls(body=body, content_type=content_type)

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> Reply:
        """A reply from a script file entry: a string (the content) or an object of fields."""
        if isinstance(data, str):
            return cls(content=data)
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown reply field(s) {sorted(unknown)!r}; known: {sorted(cls.__dataclass_fields__)!r}"
            )
        return cls(**dict(data))


MALFORMED: dict[str, tuple[str, str]] = {
    "html": (
        "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1>"
        "</center><hr><center>nginx</center></body></html>",
        "text/html",
    ),
    "truncated": (
        '{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess',
        "application/json",
    ),
    "empty": ("", "application/json"),
    "not-completion": ('{"status": "ok", "detail": "queued"}', "application/json"),
    "broken-stream": (
        'data: {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choi\n\n',
        "text/event-stream",
    ),
}
"""``Reply.malformed`` kinds: ``(body, content type)`` of 200 answers a proxy or a broken host sends."""


TOKENIZE: dict[str, tuple[str, str, str]] = {
    "llama-cpp-python": ("/extras/tokenize/count", "input", "count"),
    "llama.cpp": ("/tokenize", "content", "tokens"),
    "vllm": ("/tokenize", "prompt", "count"),
}
"""Hosts' tokenize endpoints: path, the body's field holding the text, and what the answer holds
(``{"count": n}`` or ``{"tokens": [...]}``)."""


class RecordedRequest(dict[str, Any]):
    """The JSON body of a request received by the server, with where and when it came.

    It is the body ``dict`` itself (``request["messages"]``), plus ``number`` (1, 2, ... in order
    of arrival over the server's life), ``path``, ``headers`` (case-insensitive, as HTTP's are:
    OpenAI's SDK 3 sends ``authorization``, 2 sent ``Authorization``) and ``received_at``
    (``time.monotonic()``).
    """

    def __init__(
        self, body: Mapping[str, Any], *, number: int, path: str, headers: Mapping[str, str]
    ) -> None:
        super().__init__(body)
        self.number = number
        self.path = path
        self.headers = httpx.Headers(dict(headers))
        self.received_at = time.monotonic()


Script = Reply | str | Sequence[Reply | str] | Callable[[RecordedRequest], Reply | str]


def _as_reply(value: Reply | str) -> Reply:
    return value if isinstance(value, Reply) else Reply(content=value)


def _word_count(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_word_count(part.get("text", "") if isinstance(part, dict) else part) for part in value)
    return 0


def _pieces(text: str, size: int) -> list[str]:
    if not text:
        return []
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


class OpenAIServer:
    """An OpenAI-compatible server on ``127.0.0.1`` (an ephemeral port unless ``port`` is given).

    Use it as a context manager or with ``start()`` / ``stop()``. ``url`` is the API base
    (``http://127.0.0.1:PORT/v1``). ``requests`` is a snapshot list of the chat completion requests
    received so far (thread-safe), ``request_count`` their number.

    ``chunk_size``: characters per streamed content/reasoning chunk by default.
    ``latency``: seconds added before every chat reply (on top of ``Reply.delay``).
    ``models``: ids listed by ``GET /v1/models``. ``api_key``: when set, requests whose
    ``Authorization`` header is not ``Bearer <api_key>`` get a 401.

    A model host's capacity: with ``max_concurrency``, a chat request arriving while that many
    are being answered gets a 429 with ``Retry-After: overload_retry_after`` (as a loaded hosted
    API does); ``storm(seconds, retry_after)`` answers every chat request 429 for a while.
    ``in_flight_max`` is the most requests answered at once so far, ``rejected`` the requests
    refused with 429 by either rule, ``rejected_at`` when (``time.monotonic()``).

    ``props``: the JSON ``GET /props`` answers, as llama.cpp's server does (``None``: 404).
    ``max_model_len``: added to each model ``GET /v1/models`` lists, as vLLM does.
    ``discovery_requests``: the paths of the ``GET`` requests received.

    ``tokenize``: a key of ``TOKENIZE`` (``"llama-cpp-python"``, ``"llama.cpp"``, ``"vllm"``) to
    serve that host's tokenize endpoint, which counts a text's words (``_word_count``); the other
    tokenize paths answer 404 as on that host. ``tokenize_requests`` are the bodies it received
    (every path, answered or not).
    """

    def __init__(
        self,
        script: Script = "",
        *,
        when_exhausted: Literal["repeat", "error"] = "repeat",
        chunk_size: int = 8,
        latency: float = 0.0,
        models: Sequence[str] = ("test-model",),
        api_key: str | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        max_concurrency: int | None = None,
        overload_retry_after: float = 1.0,
        tokenize: str | None = None,
        props: Mapping[str, Any] | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.props = dict(props) if props is not None else None
        self.max_model_len = max_model_len
        self.discovery_requests: list[str] = []
        if tokenize is not None and tokenize not in TOKENIZE:
            raise ValueError(f"tokenize must be one of {sorted(TOKENIZE)!r} or None, not {tokenize!r}")
        self.tokenize = tokenize
        self.tokenize_requests: list[tuple[str, dict[str, Any]]] = []
        if when_exhausted not in ("repeat", "error"):
            raise ValueError(f"when_exhausted must be 'repeat' or 'error', not {when_exhausted!r}")
        self.when_exhausted = when_exhausted
        self.chunk_size = chunk_size
        self.latency = latency
        self.models = list(models)
        self.api_key = api_key
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._counter = 0
        self._script_index = 0
        self._script: Script = ""
        self._httpd: ThreadingHTTPServer | None = None
        self._bound_port: int | None = None
        self._thread: threading.Thread | None = None
        self.max_concurrency = max_concurrency
        self.overload_retry_after = overload_retry_after
        self.in_flight = 0
        self.in_flight_max = 0
        self.rejected = 0
        self.rejected_at: list[float] = []
        self._storm_until = 0.0
        self._storm_retry_after = 0.0
        self._storm_pending: float | None = None
        self.set_script(script)

    def storm(self, seconds: float, retry_after: float, *, from_next_request: bool = False) -> None:
        """Answer every chat request 429 with ``Retry-After: retry_after`` for ``seconds``, from
        now or (``from_next_request``) from the next chat request on."""
        with self._lock:
            self._storm_retry_after = retry_after
            if from_next_request:
                self._storm_pending = seconds
            else:
                self._storm_until = time.monotonic() + seconds

    def _admit(self) -> float | None:
        """Count a request in; the Retry-After of a 429 instead when the host is over capacity."""
        with self._lock:
            now = time.monotonic()
            if self._storm_pending is not None:
                self._storm_until, self._storm_pending = now + self._storm_pending, None
            if now < self._storm_until:
                retry_after: float | None = self._storm_retry_after
            elif self.max_concurrency is not None and self.in_flight >= self.max_concurrency:
                retry_after = self.overload_retry_after
            else:
                self.in_flight += 1
                self.in_flight_max = max(self.in_flight_max, self.in_flight)
                return None
            self.rejected += 1
            self.rejected_at.append(now)
            return retry_after

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    # -- scripting and records -----------------------------------------------------------

    def set_script(self, script: Script) -> None:
        """Replace the script; a list starts again from its first reply."""
        if isinstance(script, Sequence) and not isinstance(script, str) and not script:
            raise ValueError("a reply list needs at least one reply")
        with self._lock:
            self._script = script
            self._script_index = 0

    @property
    def requests(self) -> list[RecordedRequest]:
        """The chat completion requests received so far, in order of arrival (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many chat completion requests were received."""
        with self._lock:
            return len(self._requests)

    def clear(self) -> None:
        """Forget the recorded requests (numbering goes on)."""
        with self._lock:
            self._requests.clear()

    def _record(self, body: Mapping[str, Any], path: str, headers: Mapping[str, str]) -> RecordedRequest:
        with self._lock:
            self._counter += 1
            recorded = RecordedRequest(body, number=self._counter, path=path, headers=headers)
            self._requests.append(recorded)
            return recorded

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            script = self._script
            if isinstance(script, Reply | str):
                return _as_reply(script)
            if not callable(script):
                replies = list(script)
                index = self._script_index
                self._script_index += 1
                if index < len(replies):
                    return _as_reply(replies[index])
                if self.when_exhausted == "repeat":
                    return _as_reply(replies[-1])
                return Reply(
                    status=400,
                    error=(
                        f"test server script exhausted: {len(replies)} replies scripted, "
                        f"this is chat request #{request.number}"
                    ),
                )
        return _as_reply(script(request))  # outside the lock: the callable may be slow

    # -- life cycle --------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens (or last listened) on; known once started."""
        if self._bound_port is None:
            raise RuntimeError("the server was never started: call start() or use it as a context manager")
        return self._bound_port

    @property
    def url(self) -> str:
        """The API base to give clients: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    def start(self) -> OpenAIServer:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server((self._host, self._port), _make_handler(self))
        httpd.daemon_threads = True
        httpd.block_on_close = False  # idle keep-alive connections must not hold up stop()
        self._httpd = httpd
        self._bound_port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; pending delays are cut short."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server stops first; ``True`` when it stopped."""
        return self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set()

    # -- response bodies ---------------------------------------------------------------

    @staticmethod
    def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
        calls = []
        for i, call in enumerate(reply.tool_calls):
            arguments = call.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            calls.append(
                {
                    "id": call.get("id") or f"call_{i}_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": arguments},
                }
            )
        return calls

    @staticmethod
    def _usage(reply: Reply, request: Mapping[str, Any]) -> dict[str, int] | None:
        if reply.usage is None:
            return None
        if reply.usage == AUTO:
            prompt = sum(
                _word_count(m.get("content")) for m in request.get("messages", []) if isinstance(m, dict)
            )
            completion = _word_count(reply.content or "") + _word_count(reply.reasoning_content or "")
            completion += sum(len(str(c.get("arguments", ""))) // 4 for c in reply.tool_calls)
            return {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        usage = {k: int(v) for k, v in dict(reply.usage).items()}
        usage.setdefault("prompt_tokens", 0)
        usage.setdefault("completion_tokens", 0)
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        return usage

    def completion_body(self, reply: Reply, request: Mapping[str, Any]) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` JSON for ``reply``."""
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning_content is not None:
            message[reply.reasoning_field] = reply.reasoning_content
        tool_calls = self._tool_calls(reply)
        if tool_calls:
            message["tool_calls"] = tool_calls
        body: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request.get("model", "test-model")),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
                    "logprobs": None,
                }
            ],
        }
        usage = self._usage(reply, request)
        if usage is not None:
            body["usage"] = usage
        return body

    def stream_chunks(self, reply: Reply, request: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects streamed for ``reply``, in order."""
        chat_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        model = str(request.get("model", "test-model"))
        size = reply.chunk_size or self.chunk_size

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": chat_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            }

        chunks = [chunk({"role": "assistant", "content": ""})]
        reasoning = reply.reasoning_chunks
        if reasoning is None:
            reasoning = _pieces(reply.reasoning_content or "", size)
        chunks += [chunk({reply.reasoning_field: piece}) for piece in reasoning]
        content = reply.content_chunks
        if content is None:
            content = _pieces(reply.content or "", size)
        chunks += [chunk({"content": piece}) for piece in content]
        tool_calls = self._tool_calls(reply)
        for index, call in enumerate(tool_calls):
            head = {"index": index, "id": call["id"], "type": "function"}
            head["function"] = {"name": call["function"]["name"], "arguments": ""}
            chunks.append(chunk({"tool_calls": [head]}))
            for piece in _pieces(call["function"]["arguments"], size):
                chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        chunks.append(chunk({}, reply.finish_reason or ("tool_calls" if tool_calls else "stop")))
        options = request.get("stream_options") or {}
        usage = self._usage(reply, request)
        if usage is not None and isinstance(options, dict) and options.get("include_usage"):
            last = chunk({})
            last["choices"] = []
            last["usage"] = usage
            chunks.append(last)
        return chunks


class _Server(ThreadingHTTPServer):
    # Hundreds of clients connect at once in the scale benchmark: the default backlog of 5 would
    # drop their SYNs, and each dropped one costs the client a second before it tries again.
    request_queue_size = 1024


def _error_body(status: int, message: str | None) -> dict[str, Any]:
    kind, default = _STATUS_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", "")
    )
    return {
        "error": {
            "message": message or default or f"HTTP {status}",
            "type": kind,
            "param": None,
            "code": str(status),
        }
    }


def _make_handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Send each write at once: with Nagle's algorithm a keep-alive reply waits ~40 ms for the
        # client's delayed ACK, which would count as model latency in every test and benchmark.
        disable_nagle_algorithm = True
        server_version = "tandem-openai-test-server/1"
        timeout = 60  # an idle keep-alive connection is dropped after this

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``server.requests`` instead of access logs."""

        # -- plumbing ----------------------------------------------------------------

        def _read_body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _send_raw(self, reply: Reply) -> None:
            data = (reply.body or "").encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _send_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        # -- routes ------------------------------------------------------------------

        def do_GET(self) -> None:
            server.discovery_requests.append(self.path)
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                owner = "llamacpp" if server.props is not None else "tandem-test"  # as llama.cpp's own server
                data: list[dict[str, Any]] = [
                    {"id": model, "object": "model", "created": 0, "owned_by": owner}
                    for model in server.models
                ]
                if server.max_model_len is not None:
                    for entry in data:
                        entry["max_model_len"] = server.max_model_len
                self._send_json(200, {"object": "list", "data": data})
            elif self.path.rstrip("/") == "/props" and server.props is not None:
                self._send_json(200, server.props)
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send_json(200, {"status": "ok"})
            else:
                self._send_json(404, _error_body(404, f"no route GET {self.path}"))

        def do_POST(self) -> None:
            raw = self._read_body()
            if self.path.rstrip("/") in ("/extras/tokenize/count", "/tokenize"):
                self._tokenize(raw)
                return
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send_json(404, _error_body(404, f"no route POST {self.path}"))
                return
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body is not a JSON object")
            except ValueError as exc:
                self._send_json(400, _error_body(400, f"invalid JSON body: {exc}"))
                return
            request = server._record(body, self.path, dict(self.headers.items()))
            if server.api_key is not None and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self._send_json(401, _error_body(401, "Incorrect API key provided"))
                return
            overloaded = server._admit()
            if overloaded is not None:
                headers = {"Retry-After": f"{overloaded:g}"}
                self._send_json(429, _error_body(429, "Rate limit reached: the host is at capacity"), headers)
                return
            try:
                self._answer(request, body)
            finally:
                server._leave()

        def _tokenize(self, raw: bytes) -> None:
            body = json.loads(raw or b"{}")
            server.tokenize_requests.append((self.path, body))
            path, field, answer = TOKENIZE.get(server.tokenize or "", ("", "", ""))
            if self.path.rstrip("/") != path or not isinstance(body.get(field), str):
                status = 404 if self.path.rstrip("/") != path else 422
                self._send_json(status, _error_body(status, f"no tokenizer at {self.path} for this body"))
                return
            words = _word_count(body[field])
            self._send_json(200, {"count": words} if answer == "count" else {"tokens": list(range(words))})

        def _answer(self, request: RecordedRequest, body: dict[str, Any]) -> None:
            try:
                reply = server._next_reply(request)
            except Exception as exc:  # a failing script callable is a test bug: say so loudly
                self._send_json(400, _error_body(400, f"test server script raised {exc!r}"))
                return
            if server.wait(server.latency + reply.delay):
                self.close_connection = True
                return
            if reply.disconnect:
                self.close_connection = True
                self.connection.close()
                return
            if reply.body is not None:
                self._send_raw(reply)
                return
            if reply.status != 200:
                self._send_json(reply.status, _error_body(reply.status, reply.error), reply.headers)
                return
            if body.get("stream"):
                self._stream(reply, request)
            else:
                self._send_json(200, server.completion_body(reply, request), reply.headers)

        def _stream(self, reply: Reply, request: RecordedRequest) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            try:
                for i, chunk in enumerate(server.stream_chunks(reply, request)):
                    if i and server.wait(reply.chunk_delay):
                        self.close_connection = True
                        return
                    if reply.break_after is not None and i >= reply.break_after:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self._send_chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                self._send_chunk(b"data: [DONE]\n\n")
                self._send_chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


# -- standalone process ----------------------------------------------------------------


def load_script_file(path: str | Path) -> Script:
    """Read a JSON script file.

    Accepted shapes:

    * a list of replies, consumed in order (the last repeats): ``["first", {"content": "x"}]``;
    * ``{"replies": [...]}``, the same;
    * ``{"by_prompt": [{"match": "2+2", "reply": "4"}, ...], "default": "I don't know"}``: the
      first entry whose ``match`` is a substring of the last user message answers; ``default``
      (optional) answers otherwise, and without it the request gets a 400 naming the prompt.

    A reply is a string (its content) or an object of ``Reply`` fields.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, list):
        return [Reply.from_json(item) for item in data]
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a script file holds a JSON list or object, not {type(data).__name__}")
    if "replies" in data:
        return [Reply.from_json(item) for item in data["replies"]]
    if "by_prompt" in data:
        rules = [(str(rule["match"]), Reply.from_json(rule["reply"])) for rule in data["by_prompt"]]
        default = Reply.from_json(data["default"]) if "default" in data else None

        def by_prompt(request: RecordedRequest) -> Reply:
            users = [
                m for m in request.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"
            ]
            prompt = str(users[-1].get("content", "")) if users else ""
            for match, reply in rules:
                if match in prompt:
                    return reply
            if default is not None:
                return default
            return Reply(
                status=400, error=f"test server: no scripted reply matches the prompt {prompt[:200]!r}"
            )

        return by_prompt
    raise ValueError(f"{path}: expected a list, or an object with 'replies' or 'by_prompt'")


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; the first stdout line is ``listening on URL``."""
    parser = argparse.ArgumentParser(prog="python -m tests.openai_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on start)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every chat reply")
    parser.add_argument("--reply", default="OK", help="content of the fixed reply")
    parser.add_argument("--reasoning", default=None, help="provider-separated reasoning of the fixed reply")
    parser.add_argument("--chunk-size", type=int, default=8, help="characters per streamed chunk")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between streamed chunks")
    parser.add_argument(
        "--script-file", default=None, help="JSON script (see load_script_file); wins over --reply"
    )
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    parser.add_argument("--model", action="append", default=None, help="model id listed by /v1/models")
    parser.add_argument(
        "--max-concurrency", type=int, default=None, help="answer 429 to requests beyond this many at once"
    )
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After of those 429s (seconds)")
    args = parser.parse_args(argv)

    script: Script
    if args.script_file:
        script = load_script_file(args.script_file)
    else:
        script = Reply(content=args.reply, reasoning_content=args.reasoning, chunk_delay=args.chunk_delay)
    server = OpenAIServer(
        script,
        chunk_size=args.chunk_size,
        latency=args.latency,
        models=args.model or ["test-model"],
        api_key=args.api_key,
        port=args.port,
        host=args.host,
        max_concurrency=args.max_concurrency,
        overload_retry_after=args.retry_after,
    )
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with server:
        print(f"listening on {server.url}", flush=True)
        while not done.wait(0.5):
            pass
    print(f"stopped after {server.request_count} chat requests", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
