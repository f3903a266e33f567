"""Tracing end to end: real workers export over OTLP/HTTP to a receiver started here; one dual job
with tool rounds survives a SIGKILLed Thinker and is still one trace, every step present, no
orphan span."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tandem.reasoner import tracing
from tests.integration import plan_model
from tests.integration.conftest import RESULT_SECONDS, Cluster
from tests.integration.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as got:
        yield got


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    """What the workers need to export their spans to ``receiver`` within a fraction of a second."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "tandem-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_BSP_EXPORT_TIMEOUT": "5000",
    }


def steps_of(spans: list[ReceivedSpan]) -> set[tuple[str, int]]:
    return {
        (str(s.attributes["tandem.step.kind"]), int(s.attributes["tandem.round"]))
        for s in spans
        if s.name == "tandem.step"
    }


def test_a_dual_job_with_a_killed_worker_is_one_trace_with_every_step(
    fresh_cluster: Hosts, receiver: OtlpReceiver
) -> None:
    cluster, thinker, _ = fresh_cluster

    def slow_second_turn(request: RecordedRequest) -> Reply:
        reply = plan_model.thinker(request)
        if plan_model.turn(request) == 2 and not any(plan_model.turn(r) == 2 for r in thinker.requests[:-1]):
            reply.delay = 4.0  # the first Thinker call of round 1: the worker is killed during it
        return reply

    thinker.set_script(slow_second_turn)
    env = otel_env(receiver)
    workers = cluster.start("thinker", "actor", "tools", **env)
    # The client traces too: ``submit`` opens the job's root span, exported to the same receiver.
    provider = TracerProvider(resource=Resource.create({"service.name": "tandem-client"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces"))
    )
    tracing.install(provider)
    try:
        plan = [[{"name": "add", "args": {"a": 1, "b": 1}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
        handle = cluster.submit(goal=goal_with_plan("two rounds", plan), max_rounds=6)
    finally:
        tracing.uninstall()

    deadline = time.monotonic() + 30
    while not any(plan_model.turn(r) == 2 for r in thinker.requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    cluster.kill(workers, "thinker")
    # The replacement batches its spans for a minute: only its warm shutdown exports them.
    replacement = cluster.start("thinker", **{**env, "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    time.sleep(0.5)
    assert not [
        s
        for s in receiver.spans()
        if s.attributes.get("tandem.round") == 2 and s.attributes.get("tandem.role") == "thinker"
    ]
    for group in (replacement, workers):
        cluster.stop_group(group)  # a warm shutdown exports what the worker still holds

    wanted = {
        ("intake", 0),
        ("thinker", 0),
        ("actor", 0),
        ("tools", 0),
        ("collect", 0),
        ("thinker", 1),
        ("actor", 1),
        ("tools", 1),
        ("collect", 1),
        ("thinker", 2),
        ("actor", 2),
        ("finalize", 2),
    }
    deadline = time.monotonic() + 15
    while not wanted <= steps_of(receiver.spans()) and time.monotonic() < deadline:
        time.sleep(0.2)
    spans = [s for s in receiver.spans() if s.attributes.get("tandem.job_id", handle.id) == handle.id]
    assert wanted <= steps_of(spans), f"missing steps: {wanted - steps_of(spans)}"

    assert {s.trace_id for s in spans} == {spans[0].trace_id}, "the job is not one trace"
    (root,) = [s for s in spans if not s.parent_id]
    assert root.name == "tandem.job" and root.service == "tandem-client"
    known = {s.span_id for s in spans}
    orphans = [s for s in spans if s.parent_id and s.parent_id not in known]
    assert not orphans, f"spans whose parent was never exported: {orphans}"

    resent = [
        s
        for s in spans
        if s.name == "tandem.step"
        and s.attributes["tandem.step.kind"] == "thinker"
        and s.attributes["tandem.round"] == 1
    ]
    assert any(s.attributes.get("tandem.commit") == "committed" for s in resent)
    models = [s for s in spans if s.name.startswith("chat ")]
    assert {s.attributes["gen_ai.request.model"] for s in models} >= {
        "openai/thinker-model",
        "openai/actor-model",
    }
    assert all(s.attributes["server.address"] == "127.0.0.1" for s in models)
    assert any(s.attributes.get("gen_ai.usage.output_tokens") for s in models)
    assert [s for s in spans if s.name == "execute_tool add"], "each tool call is a span"
    assert {s.service for s in spans} == {"tandem-client", "tandem-worker"}


def test_a_prefork_worker_exports_the_spans_of_its_pool_processes(
    fresh_cluster: Hosts, receiver: OtlpReceiver
) -> None:
    cluster, _, _ = fresh_cluster
    group = cluster.start("all", pool="prefork", concurrency={"all": 2}, **otel_env(receiver))
    plan = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
    handle = cluster.submit(goal=goal_with_plan("prefork", plan), max_rounds=4)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    cluster.stop_group(group)  # each pool process exports what it holds as it ends
    spans = [s for s in receiver.spans() if s.attributes.get("tandem.job_id", handle.id) == handle.id]
    assert {("intake", 0), ("thinker", 0), ("actor", 0), ("tools", 0), ("collect", 0)} <= steps_of(spans)
    assert len({s.trace_id for s in spans}) == 1
    known = {s.span_id for s in spans}
    assert all(s.parent_id in known for s in spans if s.parent_id)
