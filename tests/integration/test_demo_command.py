"""`tandem demo`: the whole pipeline on an embedded Redis, leaving no process behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _started_by(marker: str) -> list[int]:
    """Processes carrying ``marker`` in their environment: the demo and everything it started
    (children re-parent to init when the demo dies, so the parent pid cannot be used)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"TEST_DEMO_MARKER={marker}".encode() in environ:
            found.append(int(entry.name))
    return found


def _demo(marker: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
    env["TEST_DEMO_MARKER"] = marker
    return subprocess.Popen(
        [sys.executable, "-m", "tandem.workers.cli", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_gone(marker: str, timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _started_by(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _redis_port(text: str) -> int:
    found = re.search(r"embedded Redis \(redis://127\.0\.0\.1:(\d+)/0\)", text)
    assert found, text
    return int(found.group(1))


def _port_closed(port: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        time.sleep(0.2)
    return False


def test_demo_runs_a_dual_job_end_to_end_and_leaves_nothing_behind() -> None:
    marker = uuid.uuid4().hex
    proc = _demo(marker)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert "embedded Redis" in out
    assert "offline demo model" in out
    assert "tool call 1: word_count" in out and "[succeeded]: 7" in out
    assert "COMPLETED after 3 round(s)" in out
    assert "7 * 12 = 84" in out
    assert _wait_gone(marker) == []
    assert _port_closed(_redis_port(out))


def test_interrupted_demo_stops_every_process_it_started() -> None:
    marker = uuid.uuid4().hex
    proc = _demo(marker)
    assert proc.stdout is not None
    seen = ""
    for line in proc.stdout:
        seen += line
        if "workers ready" in line:
            break
    # The demo and three workers (Redis rewrites its process title over its environment block,
    # so it is checked by its port).
    assert len(_started_by(marker)) >= 4
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    assert _wait_gone(marker) == []
    assert _port_closed(_redis_port(seen))
