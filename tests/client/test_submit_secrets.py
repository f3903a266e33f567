"""``submit`` seals secrets on the client and shows the spec without them; the limits of the
client's settings apply before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
from cryptography.fernet import Fernet
from kombu.exceptions import OperationalError

from tandem.broker_config import Settings
from tandem.client.submission import submit
from tandem.tasks import runtime as runtime_module
from tandem.tasks.errors import SpecLimitError
from tandem.tasks.runtime import Runtime
from tandem.tasks.sealing import is_sealed
from tandem.tasks.state.store import JobStore


class Sent:
    id = "job-1"


class FakeApp:
    def __init__(self, broker_url: str = "redis://localhost:6379/0") -> None:
        self.sent: list[dict[str, Any]] = []
        self.conf = SimpleNamespace(broker_url=broker_url)

    def AsyncResult(self, task_id: str) -> Any:
        class Pending:
            def ready(self) -> bool:
                return False

        return Pending()

    def send_task(self, name: str, **options: Any) -> Sent:
        self.sent.append({"name": name, **options})
        return Sent()


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    rt = Runtime(
        Settings.from_env(
            {"TANDEM_SECRETS_KEY": Fernet.generate_key().decode(), "TANDEM_MAX_GOAL_CHARS": "50"}
        )
    )
    monkeypatch.setattr(runtime_module, "_runtime", rt)
    yield rt


def test_submit_seals_secrets_and_hides_them_from_the_message_display(runtime: Runtime) -> None:
    app = FakeApp()
    store = JobStore(fakeredis.FakeRedis())
    handle = submit({"goal": "g", "secrets": {"tok": "client-secret-42"}}, app=app, store=store)  # type: ignore[arg-type]
    (sent,) = app.sent
    assert sent["name"] == "tandem.infer"
    assert is_sealed(sent["kwargs"]["spec"]["secrets"]["tok"])
    assert "client-secret-42" not in repr(sent) and "'tok': '***'" in sent["kwargsrepr"]
    assert handle.status().state == "queued"  # this handle submitted it


def test_submit_applies_the_clients_limits(runtime: Runtime) -> None:
    app = FakeApp()
    with pytest.raises(SpecLimitError, match="TANDEM_MAX_GOAL_CHARS"):
        submit({"goal": "g" * 51}, app=app, store=JobStore(fakeredis.FakeRedis()))  # type: ignore[arg-type]
    assert app.sent == []


@pytest.mark.parametrize(
    ("broker", "priority", "expected"),
    [
        ("redis://localhost:6379/0", 5, 4),
        ("redis://localhost:6379/0", 9, 0),
        ("amqp://guest@localhost//", 7, 7),
    ],
)
def test_the_intake_message_has_the_jobs_priority(
    runtime: Runtime, broker: str, priority: int, expected: int
) -> None:
    # As its steps will: a worker then takes its own queue's steps before new jobs of that priority.
    app = FakeApp(broker)
    submit({"goal": "g", "priority": priority}, app=app, store=JobStore(fakeredis.FakeRedis()))  # type: ignore[arg-type]
    (sent,) = app.sent
    assert sent["priority"] == expected


class DeadBroker(FakeApp):
    def send_task(self, name: str, **options: Any) -> Sent:
        raise OperationalError("Error 111 connecting to 127.0.0.1:5672. Connection refused.")


def test_a_job_stored_before_the_broker_failed_is_accepted_not_raised(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    store = JobStore(fakeredis.FakeRedis())
    handle = submit({"goal": "g"}, app=DeadBroker(), store=store)  # type: ignore[arg-type]
    assert handle.status().state == "queued"
    # In the reconciler's index: its intake message is sent again once the broker answers.
    shard = store.machine.shard_key(store.machine.shard_of(handle.id))
    assert store.redis.zscore(shard, handle.id) is not None
    assert store.machine.intake(handle.id) is not None  # what the reconciler sends
    assert f"job {handle.id} is stored as queued, but its message could not be sent now" in caplog.text
