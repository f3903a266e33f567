"""``HostModel``: a model call keeps to its host's capacity, backs the fleet off on 429/503, and
is metered."""

from __future__ import annotations

import fakeredis
import pytest
from prometheus_client import REGISTRY

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.testing import ScriptedModelService
from tandem.tasks.hosts.capacity import Grant, HostCapacity, HostLimits, Wait, snapshot
from tandem.tasks.hosts.host_model import DEFAULT_BACKOFF, CapacityWait, HostModel, estimate_tokens

HOST = "http://gpu-9:8000/v1"
USER = [{"role": "user", "content": "What is 2 + 2?"}]


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def make(replies: list, **limits: int) -> tuple[HostModel, HostCapacity, list[dict]]:
    redis = fakeredis.FakeRedis()
    capacity = HostCapacity(redis, "t", HostLimits(HOST, **limits))
    woken: list[dict] = []
    model = HostModel(
        ScriptedModelService(replies, name="scripted"),
        role="actor",
        host=HOST,
        capacity=capacity,
        wake=woken.append,
    )
    return model, capacity, woken


def test_a_call_takes_and_returns_a_slot_debiting_real_usage() -> None:
    model, capacity, _ = make(["The answer is 4."], max_in_flight=1, tpm=1200)
    before = metric("tandem_model_call_seconds_count", role="actor", host=HOST, outcome="ok")
    reply = model.generate("be brief", USER)
    assert reply.content == "The answer is 4."
    snap = snapshot(capacity.redis, "t", capacity.limits)
    assert snap.in_flight == 0
    assert snap.stats["tokens"] == reply.usage.total_tokens
    # debited its estimate at the start, corrected to the real usage: of a 20-token burst (1 s of 1200/min)
    assert snap.tokens_burst == 20
    assert snap.tokens_available == pytest.approx(20 - reply.usage.total_tokens, abs=1)
    assert metric("tandem_model_call_seconds_count", role="actor", host=HOST, outcome="ok") == before + 1


def test_no_slot_raises_capacity_wait_before_calling() -> None:
    model, capacity, _ = make(["never sent"], max_in_flight=1)
    held = capacity.acquire(1)
    assert isinstance(held, Grant)
    with pytest.raises(CapacityWait) as caught:
        model.generate("", USER)
    assert caught.value.wait.reason == "in_flight"
    assert caught.value.capacity is capacity
    assert isinstance(caught.value, TransientModelError) and caught.value.retry_after is not None
    assert model.inner.calls == []  # type: ignore[attr-defined]


def test_a_429_backs_the_whole_fleet_off_for_retry_after() -> None:
    limited = TransientModelError("HTTP 429", retry_after=7.0, status_code=429, model="m")
    model, capacity, _ = make([limited, "after"], max_in_flight=4)
    other_worker = HostModel(ScriptedModelService(["x"]), role="actor", host=HOST, capacity=capacity)
    before = metric("tandem_model_rate_limited_total", role="actor", host=HOST, status="429")
    with pytest.raises(CapacityWait) as caught:
        model.generate("", USER)
    assert caught.value.wait.reason == "backoff"
    assert caught.value.retry_after == pytest.approx(7.0, abs=0.01)
    with pytest.raises(CapacityWait) as other:
        other_worker.generate("", USER)  # another worker of the fleet does not call the host
    assert other.value.wait.reason == "backoff"
    assert 6 < other.value.wait.seconds <= 7.01
    assert metric("tandem_model_rate_limited_total", role="actor", host=HOST, status="429") == before + 1
    assert snapshot(capacity.redis, "t", capacity.limits).in_flight == 0


def test_a_503_without_retry_after_backs_off_the_default() -> None:
    busy = TransientModelError("HTTP 503", status_code=503, model="m")
    model, capacity, _ = make([busy], max_in_flight=4)
    with pytest.raises(CapacityWait):
        model.generate("", USER)
    refused = capacity.acquire(1)
    assert isinstance(refused, Wait) and refused.reason == "backoff"
    assert refused.seconds == pytest.approx(DEFAULT_BACKOFF, abs=0.1)


def test_other_failures_release_the_slot_and_propagate() -> None:
    model, capacity, _ = make([ModelCallError("HTTP 400: bad request", status_code=400)], max_in_flight=1)
    with pytest.raises(ModelCallError) as caught:
        model.generate("", USER)
    assert not isinstance(caught.value, CapacityWait)
    assert isinstance(capacity.acquire(1), Grant)  # the slot came back


def test_the_call_that_frees_a_slot_wakes_a_waiting_step() -> None:
    dispatch = {"name": "tandem.actor_turn", "args": ["job2", 0], "options": {}}
    registered: list[tuple[bool, bool]] = []

    def reply(_sys: str, _messages: list) -> str:  # while this call holds the only slot
        registered.append(capacity.wait_for_slot("job2:0:actor", dispatch))
        return "done"

    model, capacity, woken = make([], max_in_flight=1)
    model.inner = ScriptedModelService(reply)
    model.generate("", USER)
    assert registered == [(False, True)]
    assert woken == [dispatch]


def test_without_limits_calls_are_only_metered() -> None:
    model = HostModel(ScriptedModelService(["The answer is four, as asked."]), role="thinker", host="demo")
    before = metric("tandem_model_tokens_total", role="thinker", host="demo", kind="completion")
    model.generate("", USER)
    assert metric("tandem_model_tokens_total", role="thinker", host="demo", kind="completion") > before


def test_estimate_counts_the_request_and_the_reply_allowance() -> None:
    assert estimate_tokens("x" * 400, [{"role": "user", "content": "y" * 392}], max_tokens=100) == 300
    assert estimate_tokens("", [], max_tokens=None) == 512
