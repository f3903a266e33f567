"""The ``tandem`` command's failures, as a user meets them: each one line on stderr and its own
exit status (``tandem.workers.exit_codes``). Real processes, with no server needed: Redis and the
broker are ports where nothing listens, or that accept and never answer.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tandem import __version__
from tandem.workers import exit_codes
from tandem.workers.cli import REACHES
from tandem.workers.embedded import free_port

PASSWORD = "s3cret-pass"


def tandem(*argv: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess[str]:
    """``tandem ARGV`` in a process of its own, with ``env`` over a clean tandem environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
    return subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", *argv],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=timeout,
        cwd="/",
    )


def nothing_listens() -> dict[str, str]:
    """Redis, the broker and the backend at one URL (with a password) where nothing listens."""
    url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    return {"TANDEM_REDIS_URL": url, "TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url}


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


ARGV = {
    "run": ["run", "count the words"],
    "status": ["status", "J1"],
    "watch": ["watch", "J1"],
    "cancel": ["cancel", "J1"],
    "hosts": ["hosts"],
    "tenants": ["tenants"],
    "approve": ["approve", "J1"],
    "answer": ["answer", "J1", "yes"],
    "resume": ["resume", "J1"],
    "fork": ["fork", "J1", "--round", "1"],
    "message": ["message", "J1", "use the 2025 figures"],
    "follow-up": ["follow-up", "J1", "now for 2024"],
    "version-check": ["version-check"],
}


def test_every_command_that_talks_to_redis_is_covered() -> None:
    assert set(ARGV) == set(REACHES)


@pytest.mark.parametrize("command", sorted(ARGV))
def test_redis_not_answering_is_one_line_and_exit_3(command: str) -> None:
    started = time.monotonic()
    done = tandem(*ARGV[command], **nothing_listens())
    took = time.monotonic() - started
    assert done.returncode == exit_codes.UNREACHABLE, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tandem: Redis ") and " at redis://:**@127.0.0.1:" in line, line
    assert "not answer (Error 111 connecting to 127.0.0.1:" in line and "Connection refused" in line
    assert "start redis-server there, or set TANDEM_REDIS_URL" in line
    if REACHES[command] == "both":  # the broker is asked too: the same server, named once
        assert line.startswith("tandem: Redis and the broker at ") and "TANDEM_BROKER_URL" in line
    assert PASSWORD not in done.stderr + done.stdout and done.stdout == ""
    assert took < 30  # no reconnect window: the services are asked before the command starts


def test_debug_adds_the_traceback_before_the_line() -> None:
    done = tandem("--debug", "status", "J1", **nothing_listens())
    assert done.returncode == exit_codes.UNREACHABLE
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and len(lines) > 3
    assert "redis.exceptions.ConnectionError" in done.stderr
    assert lines[-1].startswith("tandem: Redis at redis://:**@127.0.0.1:")
    after = tandem("status", "J1", "--debug", **nothing_listens())  # after the command too
    assert after.returncode == exit_codes.UNREACHABLE and "Traceback" in after.stderr


def test_a_broker_that_never_answers_is_named_within_seconds(silent_port: int) -> None:
    env = nothing_listens()
    env["TANDEM_BROKER_URL"] = f"amqp://tandem:{PASSWORD}@127.0.0.1:{silent_port}//"
    started = time.monotonic()
    done = tandem("run", "count the words", **env)
    assert done.returncode == exit_codes.UNREACHABLE, done.stderr
    assert time.monotonic() - started < 30
    [line] = done.stderr.splitlines()
    assert f"the broker at amqp://tandem:**@127.0.0.1:{silent_port}// does not answer" in line
    assert "start them, or set TANDEM_REDIS_URL and TANDEM_BROKER_URL" in line
    assert PASSWORD not in line


def test_version() -> None:
    done = tandem("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"tandem {__version__}\n", "")


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["run"], id="no-goal"),
        pytest.param(["launch"], id="unknown-command"),
        pytest.param(["status", "J1", "--bogus"], id="unknown-option"),
    ],
)
def test_a_usage_error_exits_2_before_connecting(argv: list[str]) -> None:
    done = tandem(*argv, **nothing_listens())
    assert done.returncode == exit_codes.USAGE
    assert done.stderr.startswith("usage: tandem") and done.stderr.splitlines()[-1].startswith("tandem")


def test_a_refused_spec_is_a_usage_error_even_with_redis_down() -> None:
    done = tandem("run", "g", "--max-rounds", "0", **nothing_listens())
    assert done.returncode == exit_codes.USAGE
    [line] = done.stderr.splitlines()
    assert line.startswith("tandem: ") and "max_rounds" in line
