"""``tandem health``: exit 0 only when Redis and the broker answer; one line naming what failed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError

from tandem.workers import health
from tandem.workers.cli import main
from tandem.workers.embedded import free_port
from tandem.workers.health import Answer, summary


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
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


def test_nothing_answering_exits_3_with_one_line_naming_both(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TANDEM_REDIS_URL", f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("TANDEM_BROKER_URL", f"amqp://tandem:s3cret-pass@127.0.0.1:{free_port()}/prod")
    assert main(["health", "--timeout", "2"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("tandem health: Redis (redis://:**@127.0.0.1:")
    assert "the broker (amqp://tandem:**@127.0.0.1:" in err and err.count(" failed: ") == 2
    assert "s3cret-pass" not in err and "refused" in err.lower()


def test_a_broker_that_never_answers_fails_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], silent_port: int
) -> None:
    monkeypatch.setenv("TANDEM_REDIS_URL", f"redis://127.0.0.1:{silent_port}/0")
    monkeypatch.setenv("TANDEM_BROKER_URL", f"redis://127.0.0.1:{silent_port}/1")
    assert main(["health", "--timeout", "0.5"]) == 3
    err = capsys.readouterr().err
    assert "Redis (redis://127.0.0.1:" in err and "the broker (redis://127.0.0.1:" in err
    assert err.count(" failed: ") == 2


def test_a_bad_setting_or_timeout_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TANDEM_RABBITMQ_QUEUE_TYPE", "quorum")  # with the default Redis broker
    assert main(["health"]) == 2
    assert "TANDEM_RABBITMQ_QUEUE_TYPE" in capsys.readouterr().err
    monkeypatch.delenv("TANDEM_RABBITMQ_QUEUE_TYPE")
    assert main(["health", "--timeout", "0"]) == 2


def test_the_summary_puts_what_failed_first() -> None:
    answers = [
        Answer("Redis (redis://r:6379/0)", True, 0.004),
        Answer("the broker (amqp://b//)", False, 3.0, "no answer within 3 s"),
    ]
    assert summary(answers) == (
        "the broker (amqp://b//) failed: no answer within 3 s; Redis (redis://r:6379/0) answered in 4 ms"
    )
    ok = [Answer("Redis (x)", True, 0.001), Answer("the broker (y)", True, 0.002, "celery 0, thinker 3")]
    line = "ok: Redis (x) answered in 1 ms; the broker (y) answered in 2 ms"
    assert summary(ok) == line + " (messages waiting: celery 0, thinker 3)"


def test_the_probe_imports_neither_celery_nor_litellm() -> None:
    code = (
        "import json, sys\n"
        "from tandem.workers.cli import main\n"
        "code = main(['health', '--timeout', '0.5'])\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "heavy = sorted(loaded & {'celery', 'litellm', 'networkx', 'openai'})\n"
        "print(json.dumps([code, heavy]))\n"
    )
    env = {**os.environ, "TANDEM_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    env["TANDEM_BROKER_URL"] = f"amqp://u:p@127.0.0.1:{free_port()}//"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [3, []], done.stderr


DENIED = (
    "Command # 11 (LLEN thinker) of pipeline caused error: this user has no permissions to access one "
    "of the keys used as arguments"
)


def test_a_broker_that_refuses_the_user_exits_2_naming_what_it_may_not_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(settings: object, timeout: float) -> str:
        raise NoPermissionError(DENIED)

    monkeypatch.setattr(health, "_ping_redis", lambda settings, timeout: "")
    monkeypatch.setattr(health, "_read_broker", refuse)
    url = "redis://tandem-client:s3cret-pass@127.0.0.1:6399/0"
    monkeypatch.setenv("TANDEM_REDIS_URL", url)
    monkeypatch.setenv("TANDEM_BROKER_URL", url)
    assert main(["health"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "tandem health: the broker (redis://tandem-client:**@127.0.0.1:6399/0) refused: user 'tandem-client' "
        "may not read the queue depths (LLEN of the lists of the queues celery, thinker, actor, tools and "
        f"their priority lists) (NOPERM: {DENIED}); give it the client or the worker line of "
        "docs/security.md, section 'Redis ACL users'"
    )
    assert "; Redis (redis://tandem-client:**@127.0.0.1:6399/0) answered in " in line
    assert "s3cret-pass" not in line and "failed" not in line

    def down(settings: object, timeout: float) -> str:
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")

    monkeypatch.setattr(health, "_ping_redis", down)  # an outage besides: the outage's status, 3
    assert main(["health"]) == 3
    err = capsys.readouterr().err
    assert " failed: Error 111 " in err and " refused: user 'tandem-client' " in err
