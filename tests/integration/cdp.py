"""Driving headless Chromium through the Chrome DevTools Protocol, with the standard library only.

``Browser`` starts Debian's ``chromium`` with a fresh profile and remote debugging on a free
port, and ``Page`` talks to one tab over a minimal WebSocket client (RFC 6455: masked client
frames, text messages, continuation frames, ping/pong, close). Enough for tests: navigate,
evaluate JavaScript, take a PNG screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1360,1000",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


def chromium_path() -> str | None:
    """The Chromium binary, if one is installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class WebSocket:
    """A blocking WebSocket client for ``ws://`` URLs (text frames)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parsed.path or '/'} HTTP/1.1\r\nHost: {parsed.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the WebSocket during the handshake")
            head += chunk
        status, _, self._buffer = head.partition(b"\r\n\r\n")
        if b" 101 " not in status.split(b"\r\n")[0]:
            raise ConnectionError(f"WebSocket handshake refused: {status[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the browser closed the WebSocket")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, text: str) -> None:
        """Send one text message."""
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        """The next text message (control frames are answered or skipped)."""
        message = b""
        while True:
            first, second = self._read(2)
            opcode, fin = first & 0x0F, first & 0x80
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            if opcode == 0x9:  # ping
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the browser closed the WebSocket")
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if fin:
                    return message.decode()

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self._send_frame(0x8, b"")
        self.sock.close()


class Page:
    """One browser tab over CDP."""

    def __init__(self, ws_url: str) -> None:
        self.ws = WebSocket(ws_url)
        self._next = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a command and return its result (events that arrive meanwhile are skipped)."""
        self._next += 1
        self.ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises are awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, poll: float = 0.2) -> Any:
        """Evaluate ``expression`` until it is truthy; its value, or ``TimeoutError``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(poll)
        raise TimeoutError(f"{expression!r} stayed falsy for {timeout:g} s")

    def screenshot(self) -> bytes:
        """A PNG of the page as shown."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        """Close the connection to the tab."""
        self.ws.close()


class Browser:
    """Headless Chromium with a new profile, showing ``url`` in its first tab."""

    def __init__(self, url: str, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="tandem-chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", url],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start: see its log")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])

    def page(self, timeout: float = 30.0) -> Page:
        """The first tab."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as response:
                targets = json.load(response)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return Page(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.2)
        raise RuntimeError("chromium shows no page")

    def close(self) -> None:
        """Stop the browser (by its pid) and remove its profile."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)
