"""``masked_url``: no password of a model host's URL in metric labels, ``tandem hosts``, errors or logs."""

from __future__ import annotations

import json
import logging

import fakeredis
import pytest
from prometheus_client import REGISTRY

from tandem.broker_config import Settings
from tandem.reasoner.models.direct_http import UnreadableReply
from tandem.reasoner.models.litellm_errors import MalformedReplyError, shown_host, translate
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.testing import ScriptedModelService
from tandem.tasks.hosts.capacity import HostCapacity, HostLimits, host_snapshots
from tandem.tasks.metrics import FleetCollector
from tandem.tasks.runtime import Runtime
from tandem.toolkit.redaction import masked_url
from tandem.workers.hosts import format_hosts, hosts_json

PASSWORD = "hunter2-of-the-gpu"
API_BASE = f"https://bob:{PASSWORD}@gpu-7:8000/v1/"
SHOWN = "https://bob:***@gpu-7:8000/v1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("https://user:pw@host:8000/v1", "https://user:***@host:8000/v1", id="user-and-password"),
        pytest.param("https://sk-TOKEN@host/v1", "https://***@host/v1", id="token-as-user"),
        pytest.param("https://user:@host", "https://user:***@host", id="empty-password"),
        pytest.param("http://gpu-1:8000/v1", "http://gpu-1:8000/v1", id="no-user"),
        pytest.param("openai/gpt-4o-mini", "openai/gpt-4o-mini", id="a-model-string"),
        pytest.param(
            "at http://a:b@x and rediss://:pw@y/0", "at http://a:***@x and rediss://:***@y/0", id="in-text"
        ),
        pytest.param("mailto:bob@example.com", "mailto:bob@example.com", id="no-scheme-slashes"),
    ],
)
def test_masked_url(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def _settings() -> Settings:
    return Settings.from_env(
        {
            "TANDEM_ACTOR_MODEL": "hosted_vllm/qwen",
            "TANDEM_ACTOR_API_BASE": API_BASE,
            "TANDEM_ACTOR_RPM": "60",
            "TANDEM_MODEL_LOOP": "false",  # called in this thread: the test swaps its inner model
        }
    )


def _labels_with_password() -> list[dict[str, str]]:
    return [
        sample.labels
        for family in REGISTRY.collect()
        for sample in family.samples
        if any(PASSWORD in value for value in sample.labels.values())
    ]


def test_the_host_id_and_every_metric_label_hide_the_password() -> None:
    settings = _settings()
    assert settings.actor.host_id == SHOWN and settings.host_limits("actor")[0] == SHOWN
    runtime = Runtime(settings)
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    model = runtime.model("actor")
    assert model.host == SHOWN and PASSWORD not in repr(model)  # type: ignore[attr-defined]
    model.inner = ScriptedModelService(["fine"], name="scripted")  # type: ignore[attr-defined]
    assert model.generate("be brief", [{"role": "user", "content": "hi"}]).content == "fine"
    assert REGISTRY.get_sample_value(
        "tandem_model_call_seconds_count", {"role": "actor", "host": SHOWN, "outcome": "ok"}
    )
    assert _labels_with_password() == []
    # The capacity keys and the hosts registry name it masked too.
    assert all(PASSWORD not in key.decode() for key in runtime.redis.keys("*"))


def test_tandem_hosts_and_the_fleet_gauges_mask_a_host_an_older_worker_registered() -> None:
    redis = fakeredis.FakeRedis()
    raw = API_BASE.rstrip("/")  # as a worker before the mask wrote it
    HostCapacity(redis, "tandem", HostLimits(raw, 4, None, None)).acquire(10)
    snapshots = host_snapshots(redis, _settings())
    assert PASSWORD not in format_hosts(snapshots) and SHOWN in format_hosts(snapshots)
    assert PASSWORD not in hosts_json(snapshots)
    assert {row["host"] for row in json.loads(hosts_json(snapshots))} == {SHOWN}
    families = list(FleetCollector(lambda: snapshots).collect())
    labels = [sample.labels["host"] for family in families for sample in family.samples]
    assert labels and set(labels) == {SHOWN}


def test_model_errors_and_log_lines_name_the_host_without_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = LiteLlmModelService("hosted_vllm/qwen", api_base=API_BASE)
    assert PASSWORD not in repr(service) and service.host == masked_url(API_BASE)
    assert shown_host(None) == "provider default"
    malformed = MalformedReplyError(
        UnreadableReply("not-json", body="<html>"), model="qwen", api_base=API_BASE
    )
    refused = translate(ConnectionRefusedError("refused"), attempts=1, model="qwen", api_base=API_BASE)
    with caplog.at_level(logging.WARNING):
        for error in (malformed, refused):
            logging.getLogger("tandem.test").warning("model call failed: %s", error)
            assert PASSWORD not in str(error) and "bob:***@gpu-7" in str(error)
    assert PASSWORD not in caplog.text
