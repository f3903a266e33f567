"""An intake message's secrets: a reference or a sealed value on the wire, never the clear value."""

from __future__ import annotations

import json
from unittest.mock import Mock

import pytest
from cryptography.fernet import Fernet
from kombu import Message

from tandem.broker_config.connection import BrokerConnection
from tandem.broker_config.transport import SENTINEL_TRANSPORT, TRANSPORT
from tandem.tasks.app import app
from tandem.tasks.errors import JobSpecError
from tandem.tasks.intake_secrets import STORED, conceal, for_wire, resolve, spec_version_of, stored_header
from tandem.tasks.runtime import Runtime
from tandem.tasks.sealing import SecretBox
from tandem.tasks.state.versions import SPEC_VERSION
from tandem.tasks.task_base import RedactingRequest
from tandem.toolkit.redaction import current_scope
from tests.tasks.test_versions import JOB, capture, rt  # noqa: F401  (rt: a fixture)


def test_for_wire_leaves_a_clear_secret_in_the_intake_key_and_keeps_a_sealed_one() -> None:
    box = SecretBox(Fernet.generate_key().decode())
    sealed = box.seal("b-value")
    spec = {"goal": "g", "secrets": {"a": "a-value", "b": sealed}}
    sent, stored = for_wire(spec)
    assert stored and sent["secrets"] == {"a": STORED, "b": sealed}
    assert spec["secrets"]["a"] == "a-value"  # the caller's spec is left as it is
    assert resolve(sent, json.dumps(spec), "j1")["secrets"] == {"a": "a-value", "b": sealed}
    assert for_wire({"goal": "g", "secrets": {"b": sealed}}) == (
        {"goal": "g", "secrets": {"b": sealed}},
        False,
    )


def test_a_reference_whose_intake_key_is_gone_refuses_the_job_naming_the_secret() -> None:
    with pytest.raises(JobSpecError, match=r"secret 'a' of job 'j1' was left in the job's intake key"):
        resolve({"goal": "g", "secrets": {"a": STORED}}, None, "j1")


def test_conceal_seals_for_the_owner_with_a_key_and_masks_without() -> None:
    box = SecretBox(Fernet.generate_key().decode())
    spec = {"goal": "g", "owner": "team-a", "secrets": {"a": "a-value"}}
    conceal(spec, box)
    assert spec["secrets"]["a"].startswith("sealed:v2:") and "a-value" not in json.dumps(spec)
    masked = {"goal": "g", "secrets": {"a": "a-value"}}
    conceal(masked, None)
    assert masked["secrets"] == {"a": "***"}


def test_the_stored_header_is_read_back_as_the_spec_version() -> None:
    assert spec_version_of(stored_header(1)) == 1 and spec_version_of(1) == 1 and stored_header(1) > 2


@pytest.mark.parametrize(
    ("transport", "scheme"), [pytest.param(TRANSPORT, "redis"), pytest.param(SENTINEL_TRANSPORT, "sentinel")]
)
def test_the_broker_url_names_the_broker_not_tandems_transport(transport: str, scheme: str) -> None:
    conn = BrokerConnection("redis://:pw@h:6379/3", transport=transport)
    assert conn.as_uri(include_password=True) == f"{scheme}://:pw@h:6379/3"
    assert conn.as_uri() == f"{scheme}://:**@h:6379/3"


def test_a_held_intake_message_shows_no_clear_secret_to_inspect_and_runs_from_its_body(
    rt: Runtime,  # noqa: F811  (the tasks registered)
) -> None:
    spec = {"goal": "g", "secrets": {"tok": "clear-planted"}}
    sent = app.amqp.as_task_v2("job-1", "tandem.infer", kwargs={"spec": spec}, countdown=30)
    message = Message(
        body=json.dumps(sent.body),
        headers=sent.headers,
        content_type="application/json",
        content_encoding="utf-8",
        channel=Mock(),
        delivery_info={},
    )
    request = RedactingRequest(message, app=app, task=app.tasks["tandem.infer"])
    assert request.eta is not None  # what ``inspect scheduled`` lists
    for info in (request.info(), request.info(safe=True)):  # active, reserved, scheduled, query_task
        assert "clear-planted" not in json.dumps(info, default=str)
    assert request.info()["kwargs"]["spec"]["secrets"] == {"tok": "***"}
    # The task runs from the body, decoded again in the pool: the value is still there.
    assert json.loads(request.body)[1]["spec"]["secrets"] == {"tok": "clear-planted"}


def test_an_intake_handed_back_sends_its_clear_secret_sealed_and_leaves_the_callers_spec(
    rt: Runtime,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = SecretBox(Fernet.generate_key().decode())
    rt.__dict__["secret_box"] = box
    queue = capture(monkeypatch)
    spec = {"goal": "g", "owner": "team-a", "secrets": {"tok": "clear-planted"}}
    newer = {"tandem_spec_version": SPEC_VERSION + 1}
    assert (
        app.tasks["tandem.infer"].apply(kwargs={"spec": spec}, task_id=JOB, headers=newer).state == "IGNORED"
    )
    (copy,) = queue
    sealed = copy["kwargs"]["spec"]["secrets"]["tok"]
    assert sealed.startswith("sealed:v2:") and "clear-planted" not in json.dumps(copy, default=str)
    assert spec["secrets"] == {"tok": "clear-planted"}
    from tandem.tasks.spec import JobSpec

    assert box.unseal(JobSpec.model_validate(copy["kwargs"]["spec"])) == {"tok": "clear-planted"}


def test_an_intake_with_a_reference_reads_the_secret_from_the_intake_key(rt: Runtime) -> None:  # noqa: F811
    rt.__dict__["secret_box"] = SecretBox(Fernet.generate_key().decode())
    spec = {"goal": "What is 17 * 23?", "secrets": {"tok": "clear-planted"}}
    rt.store.mark_queued(JOB, intake=json.dumps(spec))
    sent, stored = for_wire(spec)
    assert stored
    app.tasks["tandem.infer"].apply(
        kwargs={"spec": sent}, task_id=JOB, headers={"tandem_spec_version": stored_header(SPEC_VERSION)}
    )
    assert current_scope() is None  # the job's scope ended with the task (which Celery records IGNORED)
    kept = rt.store.spec(JOB)
    assert kept is not None and kept.secrets["tok"].startswith("sealed:v2:")
    assert rt.secret_box.unseal(kept) == {"tok": "clear-planted"}
