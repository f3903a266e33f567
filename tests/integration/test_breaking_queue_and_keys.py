"""Trying to break two documented promises, from the docs' own words.

docs/brokers.md: "A worker whose queues exist with another type (a worker left at ``classic`` on
quorum queues, or the other way round) stops at start, before Celery runs, with exit status 2 and
one line naming the queue, RabbitMQ's words and what to do; the queue is left as it was. [...] A
broker that does not answer at start is not refused: the worker waits for it."

docs/model-hosts.md: "An ``openai/`` model needs a key, even a dummy one. [...] with neither, the
first call fails at once (not retried: no wait brings a key) and the job fails with a message
naming ``TANDEM_<ROLE>_API_KEY``. ``hosted_vllm/<name>`` needs no key."

The RabbitMQ tests skip without a local RabbitMQ (``vhost_url``); all skip without Redis.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Producer, Queue

from tandem.broker_config import Settings
from tandem.tasks.app import create_app
from tests.integration.conftest import RESULT_SECONDS, _cluster_on, _exclusive_db
from tests.integration.rabbitmq import ctl, queues

pytestmark = pytest.mark.integration

QUORUM: dict[str, object] = {"x-queue-type": "quorum"}
CLASSIC: dict[str, object] = {}


# -- helpers ------------------------------------------------------------------------------


def _made(url: str, name: str, arguments: dict[str, object], messages: int = 0) -> None:
    """Make queue ``name`` with ``arguments`` and put ``messages`` persistent messages in it."""
    with Connection(url) as connection:
        channel = connection.default_channel
        Queue(name, queue_arguments=arguments)(channel).declare()
        producer = Producer(channel, exchange=Exchange(""))
        for n in range(messages):
            producer.publish({"n": n}, routing_key=name, delivery_mode=2)


def _counts(url: str) -> dict[str, int]:
    return {name: int(row[0]) for name, row in queues(url, "messages").items()}


def _wait_count(url: str, name: str, want: int, seconds: float = 15.0) -> int:
    deadline = time.monotonic() + seconds
    got = -1
    while time.monotonic() < deadline:
        got = _counts(url).get(name, -1)
        if got == want:
            return got
        time.sleep(0.3)
    return got


def _env(broker: str, redis: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "TANDEM_BROKER_URL": broker,
        "TANDEM_REDIS_URL": redis,
        "TANDEM_RESULT_BACKEND": redis,
    }
    env.pop("TANDEM_RABBITMQ_QUEUE_TYPE", None)
    env.update(extra)
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "worker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def _one_line(done: subprocess.CompletedProcess[str], arg: str = "x-queue-type") -> str:
    """The refusal's line, after checking the exit status and that it is one line."""
    assert done.returncode == 2, f"exit {done.returncode}; stderr: {done.stderr[-3000:]}"
    text = done.stderr.strip()
    assert "\n" not in text and "\r" not in text, f"not one line: {done.stderr[-3000:]!r}"
    assert done.stdout.strip() == "", f"stdout: {done.stdout[-2000:]!r}"
    assert text.startswith("tandem: RabbitMQ refuses the "), text
    assert "PRECONDITION_FAILED" in text and arg in text, text  # RabbitMQ's words
    assert "TANDEM_RABBITMQ_QUEUE_TYPE" in text and "rabbitmqctl delete_queue" in text, text
    return text


@pytest.fixture
def redis_db(redis_base: str) -> Iterator[str]:
    with _exclusive_db() as db:
        yield f"{redis_base}/{db}"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tandem.workers.cli", "worker", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _answers_ping(env: dict[str, str], hostname: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    app = create_app(Settings.from_env(env))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the worker exited with {proc.returncode}: {log.read_text()[-3000:]}"
            if app.control.ping(destination=[hostname], timeout=1.0):
                return True
        return False
    finally:
        app.close()


# -- promise 1: a queue made otherwise ----------------------------------------------------


def test_the_intake_queue_made_quorum_refuses_a_classic_actor_worker(vhost_url: str, redis_db: str) -> None:
    _made(vhost_url, "celery", QUORUM)
    done = _run(_env(vhost_url, redis_db), "actor")
    line = _one_line(done)
    assert line.startswith("tandem: RabbitMQ refuses the 'celery' queue"), line
    assert "The queue is a quorum queue" in line, line
    assert queues(vhost_url, "type")["celery"] == ["quorum"]


def test_a_role_all_worker_names_the_tools_queue_made_classic(vhost_url: str, redis_db: str) -> None:
    _made(vhost_url, "tools", CLASSIC)
    done = _run(_env(vhost_url, redis_db, TANDEM_RABBITMQ_QUEUE_TYPE="quorum"), "all", "--no-intake")
    line = _one_line(done)
    assert line.startswith("tandem: RabbitMQ refuses the 'tools' queue"), line
    assert "TANDEM_RABBITMQ_QUEUE_TYPE=quorum" in line and "The queue is a classic queue" in line, line
    assert queues(vhost_url, "type")["tools"] == ["classic"]


def test_the_actor_queue_made_quorum_refuses_a_classic_actor_worker(vhost_url: str, redis_db: str) -> None:
    _made(vhost_url, "actor", QUORUM)
    line = _one_line(_run(_env(vhost_url, redis_db), "actor", "--no-intake"))
    assert line.startswith("tandem: RabbitMQ refuses the 'actor' queue"), line


def test_the_messages_in_a_refused_queue_are_still_there(vhost_url: str, redis_db: str) -> None:
    _made(vhost_url, "thinker", QUORUM, messages=3)
    assert _wait_count(vhost_url, "thinker", 3) == 3
    line = _one_line(_run(_env(vhost_url, redis_db), "thinker", "--no-intake"))
    assert "'thinker'" in line
    assert _wait_count(vhost_url, "thinker", 3, seconds=3) == 3
    assert queues(vhost_url, "type")["thinker"] == ["quorum"]


def test_the_broker_password_is_not_in_the_line(vhost_url: str, redis_db: str) -> None:
    vhost = vhost_url.rsplit("/", 1)[1]
    user, password = f"brk30-{uuid.uuid4().hex[:6]}", f"Pw-{uuid.uuid4().hex}"
    ctl("add_user", user, password)
    try:
        ctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        url = f"amqp://{user}:{password}@127.0.0.1:5672/{vhost}"
        _made(url, "thinker", QUORUM)
        done = _run(_env(url, redis_db), "thinker", "--no-intake")
        line = _one_line(done)
        assert password not in done.stderr and password not in done.stdout, line
    finally:
        ctl("delete_user", user)


def test_a_queue_not_consumed_with_no_intake_does_not_stop_the_worker(
    vhost_url: str, redis_db: str, tmp_path: Path
) -> None:
    # ``celery`` made quorum, but this worker does not consume it: nothing to refuse.
    _made(vhost_url, "celery", QUORUM)
    hostname = f"brk30-{uuid.uuid4().hex[:6]}@test"
    env = _env(vhost_url, redis_db)
    log = tmp_path / "worker.log"
    proc = _start(env, log, "thinker", "--no-intake", "--pool", "threads", "--hostname", hostname)
    try:
        assert _answers_ping(env, hostname, proc, log), log.read_text()[-3000:]
    finally:
        _stop(proc)
    assert queues(vhost_url, "type")["celery"] == ["quorum"]


@pytest.mark.parametrize("kind", ["quorum", "classic"])
def test_queues_made_by_a_worker_with_the_same_settings_start_the_next_normally(
    vhost_url: str, redis_db: str, tmp_path: Path, kind: str
) -> None:
    env = _env(vhost_url, redis_db, TANDEM_RABBITMQ_QUEUE_TYPE=kind)
    for turn in ("first", "second"):  # the first makes the queues, the second finds them
        hostname = f"brk30-{turn}-{uuid.uuid4().hex[:6]}@test"
        log = tmp_path / f"{turn}.log"
        proc = _start(env, log, "all", "--pool", "threads", "--hostname", hostname)
        try:
            assert _answers_ping(env, hostname, proc, log), log.read_text()[-3000:]
        finally:
            _stop(proc)
    types = queues(vhost_url, "type")
    assert {name: types.get(name) for name in ("thinker", "actor", "tools", "celery")} == {
        name: [kind] for name in ("thinker", "actor", "tools", "celery")
    }


def test_the_advice_names_the_queues_real_type_when_only_another_argument_differs(
    vhost_url: str, redis_db: str
) -> None:
    # Beyond the letter of the promise: a classic queue made without the worker's priority
    # argument (``x-max-priority``) is refused, and the line's "what to do" must not send the
    # reader to ``quorum`` for a queue whose type is classic.
    _made(vhost_url, "thinker", CLASSIC)
    line = _one_line(_run(_env(vhost_url, redis_db), "thinker", "--no-intake"), "x-max-priority")
    assert queues(vhost_url, "type")["thinker"] == ["classic"]
    assert "a quorum queue" not in line and "another declaration" in line, line


def test_a_custom_intake_queue_made_otherwise_is_named(vhost_url: str, redis_db: str) -> None:
    _made(vhost_url, "brk-intake", QUORUM)
    done = _run(_env(vhost_url, redis_db, TANDEM_INTAKE_QUEUE="brk-intake"), "tools")
    line = _one_line(done)
    assert line.startswith("tandem: RabbitMQ refuses the 'brk-intake' queue"), line
    assert "rabbitmqctl delete_queue brk-intake -p " in line, line
    assert queues(vhost_url, "type")["brk-intake"] == ["quorum"]


@pytest.mark.parametrize(("before", "after"), [("classic", "quorum"), ("quorum", "classic")])
def test_switching_the_type_of_an_existing_fleet_stops_the_new_worker_in_one_line(
    vhost_url: str, redis_db: str, tmp_path: Path, before: str, after: str
) -> None:
    # The real case: the queues were made by a worker of the other type (with all the arguments
    # a worker declares), and hold a message.
    env = _env(vhost_url, redis_db, TANDEM_RABBITMQ_QUEUE_TYPE=before)
    hostname = f"brk30-{uuid.uuid4().hex[:6]}@test"
    log = tmp_path / "first.log"
    proc = _start(env, log, "all", "--pool", "threads", "--hostname", hostname)
    try:
        assert _answers_ping(env, hostname, proc, log), log.read_text()[-3000:]
    finally:
        _stop(proc)
    with Connection(vhost_url) as connection:  # a message left in thinker, published as is
        Producer(connection.default_channel, exchange=Exchange("")).publish(
            {"n": 1}, routing_key="thinker", delivery_mode=2
        )
    assert _wait_count(vhost_url, "thinker", 1) == 1
    done = _run(_env(vhost_url, redis_db, TANDEM_RABBITMQ_QUEUE_TYPE=after), "all")
    line = _one_line(done)
    assert f"TANDEM_RABBITMQ_QUEUE_TYPE={after}" in line and f"The queue is a {before} queue" in line, line
    types = queues(vhost_url, "type")
    assert {name: types.get(name) for name in ("thinker", "actor", "tools", "celery")} == {
        name: [before] for name in ("thinker", "actor", "tools", "celery")
    }
    assert _wait_count(vhost_url, "thinker", 1, seconds=3) == 1


def test_a_listener_that_never_speaks_amqp_is_not_refused(redis_db: str, tmp_path: Path) -> None:
    # Something accepts the connection but never answers: "does not answer" too.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        log = tmp_path / "worker.log"
        proc = _start(_env(f"amqp://guest:guest@127.0.0.1:{port}/nowhere", redis_db), log, "thinker")
        try:
            time.sleep(10)
            assert proc.poll() is None, f"the worker exited with {proc.returncode}: {log.read_text()[-3000:]}"
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_a_rabbitmq_that_does_not_answer_is_waited_for(redis_db: str, tmp_path: Path) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{_closed_port()}/nowhere"
    log = tmp_path / "worker.log"
    proc = _start(_env(url, redis_db), log, "thinker", "--pool", "threads")
    try:
        time.sleep(8)
        assert proc.poll() is None, f"the worker exited with {proc.returncode}: {log.read_text()[-3000:]}"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


# -- promise 2: an openai/ model with no key, end to end ----------------------------------


@pytest.mark.parametrize("stream", ["0", "1"], ids=["plain", "streamed"])
@pytest.mark.parametrize("role", ["actor", "thinker"])
def test_a_job_on_workers_with_no_key_fails_quickly_naming_the_setting(
    redis_base: str, monkeypatch: pytest.MonkeyPatch, role: str, stream: str
) -> None:
    setting = f"TANDEM_{role.upper()}_API_KEY"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the workers' environment copies ours
    monkeypatch.delenv(setting, raising=False)
    with _exclusive_db() as db:
        gen = _cluster_on(f"{redis_base}/{db}", **{setting: "", f"TANDEM_{role.upper()}_STREAM": stream})
        cluster, thinker, actor = next(gen)
        host = actor if role == "actor" else thinker
        try:
            assert cluster.settings.role(role).api_key is None  # an empty key counts as none
            group = cluster.start("thinker", "actor", "tools")
            assert not group.env.get("OPENAI_API_KEY") and not group.env.get(setting)
            handle = cluster.submit(goal="add 2 and 2", max_rounds=3)
            result = handle.result(timeout=RESULT_SECONDS)
            assert result.status == "failed", result
            assert setting in (result.error or ""), result.error
            # At once: not retried inside the call ("after N attempts"), never parked for a retry.
            assert "attempts" not in (result.error or ""), result.error
            assert [e for e in cluster.store.events(handle.id, timeout=5) if e["type"] == "waiting"] == []
            assert int(cluster.store.machine.record(handle.id).get("retries") or 0) == 0
            assert host.request_count == 0  # no key: the host was never asked
        finally:
            next(gen, None)


def test_a_job_with_a_hosted_vllm_actor_and_no_key_completes(
    redis_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("TANDEM_ACTOR_API_KEY", raising=False)
    with _exclusive_db() as db:
        gen = _cluster_on(
            f"{redis_base}/{db}", TANDEM_ACTOR_API_KEY="", TANDEM_ACTOR_MODEL="hosted_vllm/actor-model"
        )
        cluster, _thinker, actor = next(gen)
        try:
            cluster.start("thinker", "actor", "tools")
            result = cluster.submit(goal="add 2 and 2", max_rounds=3).result(timeout=RESULT_SECONDS)
            assert actor.request_count >= 1
            assert result.status == "completed", result
        finally:
            next(gen, None)
