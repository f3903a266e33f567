"""A client's options and its two pools of connections: event streams held open never keep a call
from being sent, and a full pool of the client's own is ``PoolExhausted``, named as the client's
limit with what to do, never "the API does not answer".

The pools are httpx's own, so these tests send over real loopback sockets, to a small server here
that answers an event stream with one event and then heartbeats until the client hangs up.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tandem.client.http import AsyncClient, Client, ClientError, PoolExhausted
from tandem.client.http.calls import Requests
from tandem.client.http.options import STREAM_SILENCE, ClientOptions

ROUND = {"id": "1-0", "type": "round_started", "at": 1.0, "round": 0, "max_rounds": 3}


class _Api(BaseHTTPRequestHandler):
    """``/healthz`` answers at once; a job's events: one event, then a heartbeat every 50 ms."""

    def do_GET(self) -> None:
        if not self.path.endswith("/events"):
            body = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(f"id: 1-0\ndata: {json.dumps(ROUND)}\n\n".encode())
            while not self.server.stopping.is_set():  # type: ignore[attr-defined]
                self.wfile.flush()
                time.sleep(0.05)
                self.wfile.write(b": heartbeat\n\n")
        except OSError:
            return  # the client hung up

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.daemon_threads = True
    server.stopping = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.stopping.set()  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_a_sync_client_holding_all_its_streams_still_answers_and_names_its_own_limit(api_url: str) -> None:
    with Client(api_url, "a-token", max_streams=2, timeout=0.5) as api:
        held = [api.events("j1"), api.events("j1")]
        assert [next(events).id for events in held] == ["1-0", "1-0"]  # both streams open
        assert api.health() == {"ok": True}  # calls have a pool of their own
        started = time.monotonic()
        with pytest.raises(PoolExhausted) as full:
            next(api.events("j1"))
        assert time.monotonic() - started >= 0.5  # it waited its timeout for a stream to close
        held[0].close()  # one stream hung up: its connection is free again
        assert next(api.events("j1")).id == "1-0"
    assert full.value.code == "client_streams_full" and isinstance(full.value, ClientError)
    message = str(full.value)
    assert "already holds 2 event streams open (its max_streams)" in message
    assert "the client's own limit, not the API's" in message and "larger max_streams" in message
    assert "does not answer" not in message


def test_an_async_client_holding_all_its_streams_still_answers_and_names_its_own_limit(api_url: str) -> None:
    async def main() -> tuple[PoolExhausted, dict[str, Any]]:
        async with AsyncClient(api_url, "a-token", max_streams=3, timeout=0.5) as api:
            held = [api.events("j1") for _ in range(3)]
            assert [(await events.__anext__()).id for events in held] == ["1-0"] * 3
            health = await api.health()
            with pytest.raises(PoolExhausted) as full:
                await api.events("j1").__anext__()
            await held[0].aclose()  # type: ignore[attr-defined]
            assert (await api.events("j1").__anext__()).id == "1-0"
            return full.value, health

    full, health = asyncio.run(main())
    assert health == {"ok": True}
    assert full.code == "client_streams_full" and "already holds 3 event streams open" in str(full)


def test_a_full_pool_for_calls_is_named_too() -> None:
    error = ClientOptions(max_calls=7, timeout=2).pool_exhausted(streams=False)
    assert isinstance(error, PoolExhausted) and error.code == "client_calls_full"
    assert "all 7 connections this client keeps for calls (its max_calls) were busy for 2 s" in str(error)
    assert "larger max_calls" in str(error)


def test_the_pools_are_sized_by_the_options() -> None:
    options = ClientOptions(max_streams=150, max_calls=8)
    assert options.limits(streams=True).max_connections == 150
    assert options.limits(streams=False).max_connections == 8
    assert ClientOptions().limits(streams=True).max_connections == 100  # TANDEM_API_MAX_STREAMS' default


def test_a_stream_is_cut_after_stream_silence_and_waits_timeout_for_a_connection() -> None:
    requests = Requests("http://api.test", None, ClientOptions(timeout=7, stream_silence=3))
    timeout = requests.stream("j1", "0", None, 0.0).extensions["timeout"]
    assert (timeout["read"], timeout["pool"]) == (3, 7)
    assert requests.stream("j1", "0", 101.0, 100.0).extensions["timeout"]["read"] == 1.0  # the deadline
    default = Requests("http://api.test", None, ClientOptions()).stream("j1", "0", None, 0.0)
    assert default.extensions["timeout"]["read"] == STREAM_SILENCE == 45.0


@pytest.mark.parametrize("client", [Client, AsyncClient])
@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("timeout", 0, "timeout must be a number of seconds, more than 0, got 0"),
        ("retry_for", -1, "retry_for must be a number of seconds, 0 or more, got -1"),
        ("stream_silence", float("inf"), "stream_silence must be a number of seconds, more than 0, got inf"),
        ("stream_silence", "45", "stream_silence must be a number of seconds, more than 0, got '45'"),
        ("max_streams", 0, "max_streams must be a whole number of at least 1 (e.g. 100), got 0"),
        ("max_calls", 2.5, "max_calls must be a whole number of at least 1 (e.g. 100), got 2.5"),
    ],
)
def test_a_bad_option_is_refused_when_the_client_is_made(
    client: type, option: str, value: Any, says: str
) -> None:
    with pytest.raises(ValueError) as refused:
        client("http://api.test", "a-token", **{option: value})
    assert str(refused.value) == says


def test_retry_for_zero_asks_a_read_once() -> None:
    asked: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(503, json={"error": {"code": "redis_unavailable", "message": "down"}})

    api = Client("http://api.test", "a-token", retry_for=0, transport=httpx.MockTransport(refuse))
    with api, pytest.raises(ClientError) as raised:
        api.health()
    assert asked == ["/healthz"] and raised.value.status == 503
