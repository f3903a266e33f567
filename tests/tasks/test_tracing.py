"""Tracing (``tandem.reasoner.tracing``, ``tandem.tasks.tracing``): one trace per job, a span per
step with its claim and commit, GenAI model-call spans, tool spans; nothing recorded (and the SDK
not even imported) when the ``OTEL_*`` variables ask for nothing. Spans go to the SDK's in-memory
exporter; the job runs in this thread, each message applied with the headers it was sent with."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.trace_settings import TraceSettings
from tandem.reasoner import tracing
from tandem.reasoner.loop.step import Step
from tandem.tasks import runtime as runtime_module
from tandem.tasks import worker_signals
from tandem.tasks.app import app
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.claims import Reconciled

JOB = "trace-job-1"
SECRET = "tr4ce-s3cret-value"


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    for module in app.conf.imports:  # the tasks and their signal handlers, as a worker has them
        importlib.import_module(module)
    runtime = Runtime(Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


Sent = deque[tuple[str, list[Any], dict[str, str] | None]]


def capture(monkeypatch: pytest.MonkeyPatch) -> Sent:
    queue: Sent = deque()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **kw: Any) -> None:
        queue.append((name, list(args or []), kw.get("headers")))

    monkeypatch.setattr(app, "send_task", send_task)
    return queue


def drain(queue: Sent) -> list[str]:
    ran = []
    while queue:
        name, args, headers = queue.popleft()
        app.tasks[name].apply(args=args, headers=headers)
        ran.append(name)
    return ran


def run_job(monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any], headers: Any = None) -> list[str]:
    """Run a job in this thread: every message applied in order, with the headers it was sent with."""
    queue = capture(monkeypatch)
    app.tasks["tandem.infer"].apply(kwargs={"spec": spec}, task_id=JOB, ignore_result=True, headers=headers)
    return drain(queue)


def by_name(exported: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in exported if s.name == name]


def test_a_job_is_one_trace_with_a_span_per_step_and_no_orphan(
    rt: Runtime, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = run_job(monkeypatch, {"goal": "What is 17 * 23?"})
    assert "tandem.run_tool" in ran
    exported = spans.get_finished_spans()
    assert len({s.context.trace_id for s in exported}) == 1  # one trace
    known = {s.context.span_id for s in exported}
    roots = [s for s in exported if s.parent is None]
    assert [s.name for s in roots] == ["tandem.job"]  # a bare client's job: its trace starts at intake
    assert all(s.parent.span_id in known for s in exported if s.parent is not None)  # no orphan

    steps = by_name(exported, "tandem.step")
    kinds = [s.attributes["tandem.step.kind"] for s in steps]  # type: ignore[index]
    assert {"intake", "thinker", "actor", "tools", "collect", "finalize"} <= set(kinds)
    for step in steps:
        attrs = step.attributes or {}
        assert attrs["tandem.job_id"] == JOB
        if attrs["tandem.step.kind"] != "intake":
            assert attrs["tandem.claim"] == "claimed"
            assert isinstance(attrs["tandem.attempt"], int)
        assert attrs.get("tandem.commit") in {"committed", "created", "ended completed"}
    thinker = next(s for s in steps if (s.attributes or {})["tandem.step.kind"] == "thinker")
    assert (thinker.attributes or {})["tandem.role"] == "thinker"
    assert (thinker.attributes or {})["tandem.round"] == 0

    models = [s for s in exported if s.name.startswith("chat ")]
    assert models, "each model call is a span"
    model = models[0].attributes or {}
    assert model["gen_ai.operation.name"] == "chat"
    assert model["gen_ai.request.model"]
    assert "gen_ai.usage.input_tokens" in model and "gen_ai.usage.output_tokens" in model
    assert model["gen_ai.response.finish_reasons"] in (("stop",), ("tool_calls",))
    assert "gen_ai.input.messages" not in model  # content only when the operator opts in
    assert all(s.parent is not None and s.parent.span_id in known for s in models)
    tools = [s for s in exported if s.name.startswith("execute_tool ")]
    assert tools and (tools[0].attributes or {})["gen_ai.operation.name"] == "execute_tool"


def test_a_submitted_job_continues_its_clients_trace(
    rt: Runtime, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.tasks.tracing import job_span

    with tracing.span("client request") as outer:
        assert outer is not None
        carrier = job_span(JOB)  # what ``submit`` stores in the spec and the intake's headers
    run_job(monkeypatch, {"goal": "What is 17 * 23?", "trace_context": carrier}, headers=carrier)
    exported = spans.get_finished_spans()
    assert {s.context.trace_id for s in exported} == {outer.get_span_context().trace_id}
    assert len(by_name(exported, "tandem.job")) == 1  # the intake opened no second one
    stored = rt.store.spec(JOB)
    assert stored is not None and stored.trace_context == carrier


def test_a_step_resent_by_the_reconciler_joins_the_jobs_trace(
    rt: Runtime, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = capture(monkeypatch)
    app.tasks["tandem.infer"].apply(kwargs={"spec": {"goal": "What is 17 * 23?"}}, task_id=JOB)
    queue.clear()  # the first step's message is lost
    worker_signals._resend(JOB, Reconciled(action="resend", round=0, kind="thinker"))
    assert queue and queue[0][2] and "traceparent" in queue[0][2]  # headers from the stored spec
    drain(queue)
    exported = spans.get_finished_spans()
    assert len({s.context.trace_id for s in exported}) == 1
    assert {(s.attributes or {}).get("tandem.step.kind") for s in by_name(exported, "tandem.step")} >= {
        "intake",
        "thinker",
        "finalize",
    }


def test_content_is_recorded_only_when_asked_and_then_redacted(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.toolkit.redaction import register_secret

    register_secret(SECRET)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider, content=True)
    try:
        run_job(monkeypatch, {"goal": f"What is 17 * 23? The password is {SECRET}"})
    finally:
        tracing.uninstall()
    models = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    prompt = str((models[0].attributes or {})["gen_ai.input.messages"])
    assert "17 * 23" in prompt and SECRET not in prompt and "***" in prompt
    assert "gen_ai.output.messages" in (models[0].attributes or {})


def test_a_step_ended_by_ignore_is_not_an_error(
    rt: Runtime, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_job(monkeypatch, {"goal": "What is 17 * 23?"})
    spans.clear()
    app.tasks["tandem.thinker_turn"].apply(args=[JOB, 0])  # a duplicate: the job has ended
    (step,) = by_name(spans.get_finished_spans(), "tandem.step")
    attrs = step.attributes or {}
    assert attrs["tandem.claim"] != "claimed" and attrs["tandem.exit"] == "Ignore"
    assert step.status.status_code.name == "UNSET"


def test_nothing_is_recorded_when_tracing_is_off(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not tracing.enabled()
    with tracing.span("x") as span:
        assert span is None
    assert (
        tracing.carrier() == {}
        and tracing.extract({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}) is None
    )
    run_job(monkeypatch, {"goal": "What is 17 * 23?"})
    stored = rt.store.spec(JOB)
    assert stored is not None and stored.trace_context is None


def test_a_process_with_no_otel_settings_never_starts_the_tracing_sdk() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    code = (
        "import sys\n"
        "import tandem.tasks.steps.model, tandem.tasks.steps.tools, tandem.tasks.worker_signals\n"
        "from tandem.tasks.runtime import get_runtime\n"
        "get_runtime()\n"
        "from tandem.reasoner import tracing\n"
        "assert tracing.STATE.provider is None and not tracing.enabled()\n"
        # (redis-py imports the SDK's metrics part by itself once the SDK is installed)
        "assert 'opentelemetry.sdk.trace' not in sys.modules, 'the tracing SDK was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


@pytest.mark.parametrize(
    ("env", "exporters", "content"),
    [
        pytest.param({}, (), False, id="nothing-set-is-off"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp",), False, id="endpoint-is-otlp"
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
            ("otlp",),
            False,
            id="traces-endpoint",
        ),
        pytest.param({"OTEL_TRACES_EXPORTER": "console"}, ("console",), False, id="console"),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"},
            (),
            False,
            id="none-wins",
        ),
        pytest.param(
            {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, (), False, id="disabled-wins"
        ),
        pytest.param(
            {"OTEL_TRACES_EXPORTER": "otlp", "TANDEM_TRACE_CONTENT": "true"}, ("otlp",), True, id="content"
        ),
    ],
)
def test_trace_settings(env: dict[str, str], exporters: tuple[str, ...], content: bool) -> None:
    got = TraceSettings.from_env(env)
    assert (got.exporters, got.content, got.enabled) == (exporters, content, bool(exporters))


@pytest.mark.parametrize(
    ("env", "named"),
    [
        pytest.param({"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin", id="unknown-exporter"),
        pytest.param({"TANDEM_TRACE_CONTENT": "maybe"}, "TANDEM_TRACE_CONTENT", id="not-a-flag"),
    ],
)
def test_trace_settings_refuse_what_they_cannot_use(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        TraceSettings.from_env(env)


def test_a_trace_context_holds_only_w3c_keys() -> None:
    from tandem.tasks.spec import JobSpec

    with pytest.raises(ValueError, match="only 'traceparent' and 'tracestate'"):
        JobSpec(goal="g", trace_context={"baggage": "x"})
    assert Step(0, "thinker").kind == "thinker"


def test_a_job_parked_for_approval_and_resumed_by_a_decision_stays_one_trace(
    rt: Runtime, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_job(monkeypatch, {"goal": "What is 17 * 23?", "approve_tools": "all"})
    parked = [s for s in spans.get_finished_spans() if any(e.name == "tandem.park" for e in s.events)]
    assert parked and (parked[0].attributes or {})["tandem.commit"] == "waiting"
    event = next(e for e in parked[0].events if e.name == "tandem.park")
    assert (event.attributes or {})["tandem.wait.reason"] == "approval"
    assert rt.store.result(JOB) is None  # waiting for a person

    queue = capture(monkeypatch)
    app.tasks["tandem.decide"].apply(kwargs={"job_id": JOB, "decisions": True})  # a client: no headers
    drain(queue)
    exported = spans.get_finished_spans()
    assert rt.store.result(JOB).status == "completed"  # type: ignore[union-attr]
    assert len({s.context.trace_id for s in exported}) == 1
    (resumed,) = by_name(exported, "tandem.resume")
    assert (resumed.attributes or {})["tandem.resume.cause"] == "approval"
    assert (resumed.attributes or {})["tandem.accepted"] is True
    known = {s.context.span_id for s in exported}
    assert all(s.parent.span_id in known for s in exported if s.parent is not None)


def test_a_429_is_an_event_of_the_model_span_and_the_fleet_back_off_another(
    spans: InMemorySpanExporter,
) -> None:
    from tandem.reasoner.errors import TransientModelError
    from tandem.reasoner.testing import ScriptedModelService
    from tandem.tasks.hosts.capacity import HostCapacity, HostLimits
    from tandem.tasks.hosts.host_model import CapacityWait, HostModel

    host = "http://gpu-9:8000/v1"
    capacity = HostCapacity(fakeredis.FakeRedis(), "t", HostLimits(host, max_in_flight=4))
    limited = TransientModelError("HTTP 429", retry_after=7.0, status_code=429, model="m")
    model = HostModel(
        ScriptedModelService([limited], name="scripted"), role="actor", host=host, capacity=capacity
    )
    with pytest.raises(CapacityWait):
        model.generate("", [{"role": "user", "content": "2 + 2?"}])
    (span,) = spans.get_finished_spans()
    assert span.name == "chat scripted" and span.status.status_code.name == "ERROR"
    assert (span.attributes or {})["error.type"] == "CapacityWait"
    events = {e.name: dict(e.attributes or {}) for e in span.events}
    assert events["gen_ai.rate_limited"] == {"http.response.status_code": 429, "tandem.retry_after": 7.0}
    assert events["tandem.fleet_backoff"] == {"tandem.backoff_seconds": 7.0}


def test_a_model_span_names_the_host_never_its_credentials(spans: InMemorySpanExporter) -> None:
    with tracing.model_span("hosted_vllm/qwen3", "https://user:pa55word@gpu-1.example:8443/v1", "thinker"):
        pass
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["server.address"] == "gpu-1.example" and attrs["server.port"] == 8443
    assert (
        attrs["gen_ai.provider.name"] == "hosted_vllm"
        and attrs["gen_ai.request.model"] == "hosted_vllm/qwen3"
    )
    assert "pa55word" not in repr(attrs)


@pytest.mark.parametrize("direct", [True, False], ids=["direct-http", "litellm"])
def test_a_retry_on_the_model_loop_is_an_event_of_the_calls_span(
    spans: InMemorySpanExporter, direct: bool
) -> None:
    from tandem.reasoner.models.litellm_service import LiteLlmModelService
    from tandem.tasks.hosts.host_model import HostModel
    from tandem.tasks.hosts.model_loop import ModelLoop
    from tests.openai_server import OpenAIServer, Reply

    loop = ModelLoop("test-trace-loop", direct_http=direct)
    script = [Reply(status=429, headers={"Retry-After": "0.1"}), Reply("4")]
    try:
        with OpenAIServer(script) as server:
            inner = LiteLlmModelService(
                "openai/test-model", api_base=server.url, api_key="sk-test-trace-4242"
            )
            model = HostModel(inner, role="actor", host=server.url, model_loop=loop)
            assert model.model_loop is loop  # the call runs on the loop's thread
            with tracing.span("step"):
                assert model.generate("", [{"role": "user", "content": "2 + 2?"}]).content == "4"
    finally:
        loop.stop()
    (call,) = [s for s in spans.get_finished_spans() if s.name == "chat openai/test-model"]
    retries = [dict(e.attributes or {}) for e in call.events if e.name == "gen_ai.retry"]
    assert retries == [
        {"tandem.attempt": 1, "tandem.retry_in": pytest.approx(0.1, abs=0.05), "error.type": "429"}
    ]
    assert (call.attributes or {})["server.address"] == "127.0.0.1"


def test_an_api_request_with_a_traceparent_submits_its_job_in_that_trace(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.datastructures import Headers

    from tandem.workers.api import app as api_app

    seen: list[dict[str, str]] = []
    monkeypatch.setattr(api_app, "submit", lambda spec, **kw: seen.append(tracing.carrier()))
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    headers = Headers({"traceparent": f"00-{trace_id}-b7ad6b7169203331-01", "authorization": "Bearer x"})
    api_app._submit_under(tracing.extract(headers), {"goal": "g"}, None, None)
    assert seen[0]["traceparent"].split("-")[1] == trace_id
    assert tracing.carrier() == {}  # detached again


def test_a_bare_clients_intake_delivered_twice_keeps_the_jobs_one_trace(
    rt: Runtime, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = capture(monkeypatch)
    for _ in range(2):  # redelivered: its worker died after creating the job
        app.tasks["tandem.infer"].apply(kwargs={"spec": {"goal": "What is 17 * 23?"}}, task_id=JOB)
    drain(queue)
    exported = spans.get_finished_spans()
    assert len(by_name(exported, "tandem.job")) == 1 and len({s.context.trace_id for s in exported}) == 1
    intakes = [
        s for s in by_name(exported, "tandem.step") if (s.attributes or {})["tandem.step.kind"] == "intake"
    ]
    assert sorted((s.attributes or {})["tandem.commit"] for s in intakes) == ["created", "duplicate"]
