"""The compaction step on workers (``tandem.compact_thinker``/``tandem.compact_actor``): a model step
whose request would pass ``TANDEM_COMPACT_AT`` of its budget moves the job to the step, which
summarizes the role's older rounds with the role's model, commits one ``summary`` entry and its
``memory_compacted`` event, and moves back. Run twice (a worker killed mid-summary) it stores one
entry; a summary model that keeps failing ends in a ``dropped`` entry, never in a failed job; a
cancel, a person's message, resume and fork of a compacted job.

The jobs run in this thread on fakeredis through the real Celery tasks (every message applied in
the order it was sent), with scripted models that have a 4,096-token window.
"""

from __future__ import annotations

import importlib
import re
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.reasoner.context.summary import SUMMARY_PROMPT
from tandem.reasoner.errors import TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.testing import ScriptedModelService
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.control.messages import message_job
from tandem.tasks.control.resume import fork_job, resume_job
from tandem.tasks.job_events import JobEvent, MemoryCompacted
from tandem.tasks.runtime import Runtime
from tandem.workers.display import render_event
from tests.event_order import order_problems

JOB = "job-compact-1"
WINDOW = 4096
LONG = "The page says: " + "lorem ipsum dolor sit amet " * 40  # about 400 tokens by the estimate


class WorkerDied(BaseException):
    """What a step sees of its worker's death: nothing after this point runs."""


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    for module in app.conf.imports:  # the tasks, as a worker registers them
        importlib.import_module(module)
    runtime = Runtime(Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


class Host:
    """The scripted host of a mono job: long replies until round ``rounds``, then a deliverable;
    a summary request gets a short summary naming the rounds it read (``summaries``), or what
    ``on_summary`` says."""

    def __init__(self, rounds: int, on_summary: Callable[[int], Any] | None = None) -> None:
        self.rounds = rounds
        self.summaries: list[list[int]] = []
        self.requests: list[list[dict[str, Any]]] = []
        self.on_summary = on_summary
        self.model = ScriptedModelService(self.reply, context_tokens=WINDOW)

    def reply(self, sys: str, messages: list[dict[str, Any]]) -> Any:
        if sys == SUMMARY_PROMPT:
            read = [int(n) for n in re.findall(r"^Round (\d+):", messages[-1]["content"], re.M)]
            self.summaries.append(read)
            if self.on_summary is not None:
                said = self.on_summary(len(self.summaries))
                if said is not None:
                    return said
            return f"Rounds {read[0]}-{read[-1]}: read pages, all lorem ipsum."
        self.requests.append(messages)
        text = "\n".join(str(m.get("content")) for m in messages)
        now = int(re.findall(r"\[Round (\d+) of", text)[-1]) - 1
        if now >= self.rounds - 1:
            return "<deliverable>done</deliverable>"
        return f"Round {now}. {LONG}"


def run_job(
    monkeypatch: pytest.MonkeyPatch,
    rt: Runtime,
    spec: dict[str, Any],
    host: Host,
    job_id: str = JOB,
    first: tuple[str, list[Any]] | None = None,
) -> list[str]:
    """Run a job in this thread (a step whose worker "died" is taken over once its lease ran out);
    the names of the tasks run."""
    monkeypatch.setattr(rt, "model", lambda role, mode="dual": host.model)
    queue: deque[tuple[str, list[Any]]] = deque()
    headers: dict[tuple[str, str], Any] = {}  # the trace context each message was sent with

    def send_task(name: str, args: Any = None, **kw: Any) -> None:
        queue.append((name, list(args or [])))
        headers[name, repr(list(args or []))] = kw.get("headers")

    monkeypatch.setattr(app, "send_task", send_task)
    if first is None:
        app.tasks["tandem.infer"].apply(kwargs={"spec": spec}, task_id=job_id, ignore_result=True)
    else:
        queue.append(first)
    ran = []
    while queue:
        name, args = queue.popleft()
        ran.append(name)
        try:
            app.tasks[name].apply(args=args, headers=headers.get((name, repr(args))))
        except WorkerDied:
            rt.redis.hset(rt.store.key(args[0], "state"), "lease_until", "1.0")  # nobody renewed it
            queue.appendleft((name, args))  # the reconciler sends the step again
    assert rt.store.result(job_id) is not None, "the job did not end"
    return ran


def summaries(rt: Runtime, job_id: str = JOB) -> list[ModelMessage]:
    return [m for m in rt.store.memory(job_id).get_messages() if m.role == "summary"]


def events(rt: Runtime, job_id: str = JOB) -> list[JobEvent]:
    return rt.store.read_events(job_id, count=100_000)


def test_a_long_job_is_compacted_by_a_step_of_its_own_and_completes(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host(12)
    ran = run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    result = rt.store.result(JOB)
    assert result is not None and result.status == "completed", result
    assert "tandem.compact_actor" in ran and "tandem.compact_thinker" not in ran
    entries = summaries(rt)
    assert entries and all(e.summary and e.summary.how == "summarized" for e in entries)
    read = [r for s in host.summaries for r in s]
    assert len(read) == len(set(read)) and read == sorted(read)  # no round read twice
    memory = rt.store.memory(JOB)
    assert all(memory.get_message(r, "actor") is not None for r in range(12))  # the originals stay
    assert order_problems(events(rt)) == []  # a compaction's event follows its round's round_started
    compactions = [e for e in events(rt) if isinstance(e, MemoryCompacted)]
    assert compactions and compactions[0].how == "summarized"
    assert (
        compactions[0].summary_of_rounds[0] == 0
        and compactions[0].tokens_after < compactions[0].tokens_before
    )
    assert "memory compacted: rounds 1–" in render_event(compactions[0])
    assert result.usage.calls == 12 + len(host.summaries)  # the summaries' calls count with the job's
    last = "\n".join(str(m["content"]) for m in host.requests[-1])
    assert entries[-1].content in last and "Round 1. The page" not in last


def test_a_summary_step_killed_mid_call_stores_one_summary(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    died: list[int] = []

    def kill_first(n: int) -> Any:
        if not died:
            died.append(n)
            raise WorkerDied()
        return None

    host = Host(12, kill_first)
    run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    result = rt.store.result(JOB)
    assert result is not None and result.status == "completed", result
    assert died and host.summaries[0] == host.summaries[1]  # the step ran again for the same rounds
    entries = summaries(rt)
    spans = [(e.summary.since, e.summary.last) for e in entries if e.summary]
    assert len(spans) == len(set(spans)) == len(host.summaries) - 1  # one stored per committed run
    read = [r for s in host.summaries[1:] for r in s]
    assert len(read) == len(set(read))


def test_a_summary_model_that_keeps_failing_ends_in_a_drop_not_a_failed_job(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(n: int) -> Any:
        return TransientModelError("503 from the host", model="scripted")

    host = Host(12, fail)
    ran = run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    result = rt.store.result(JOB)
    assert result is not None and result.status == "completed", result
    entries = summaries(rt)
    assert entries and all(e.summary and e.summary.how == "dropped" for e in entries)
    assert "summarizing them failed: TransientModelError" in entries[0].content
    assert ran.count("tandem.compact_actor") >= 3  # parked and retried before falling back
    assert any(e.type == "waiting" for e in events(rt))
    dropped = [e for e in events(rt) if isinstance(e, MemoryCompacted) and e.how == "dropped"]
    assert dropped and dropped[0].rounds_dropped == dropped[0].summary_of_rounds


def test_a_cancel_during_the_summary_ends_the_job_and_keeps_the_summary(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cancel(n: int) -> None:  # says nothing: the summary is the host's own
        if n == 1:
            rt.store.request_cancel(JOB)

    host = Host(12, cancel)
    run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    result = rt.store.result(JOB)
    assert result is not None and result.status == "cancelled"
    assert len(summaries(rt)) == 1  # committed with its step; the next step saw the cancel
    # resumed, the job goes on from the model step and never summarizes those rounds again
    host.on_summary = None
    resume_job(rt, JOB)
    record = rt.machine.job(JOB)
    assert record is not None
    run_job(monkeypatch, rt, {}, host, first=("tandem.actor_turn", [JOB, record.round]))
    result = rt.store.result(JOB)
    assert result is not None and result.status == "completed", result
    read = [r for s in host.summaries for r in s]
    assert len(read) == len(set(read))


def test_a_message_sent_during_the_summary_reaches_that_rounds_model_call(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []

    def message(n: int) -> None:
        if n == 1:
            sent.append(message_job(rt.store, JOB, "Count the pages too."))

    host = Host(12, message)
    run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    assert sent and sent[0]["accepted"]
    compacted_at = next(e.round for e in events(rt) if isinstance(e, MemoryCompacted))
    assert sent[0]["round"] == compacted_at  # the round whose model call had not started
    asked = [r for r in host.requests if any("Count the pages too." in str(m["content"]) for m in r)]
    assert asked and len(asked) == 12 - compacted_at  # from that round's call on, every one
    summary_requests = [c for c in host.model.calls if c["sys_prompt"] == SUMMARY_PROMPT]
    assert all("Count the pages too." not in str(c["messages"]) for c in summary_requests)


def test_a_fork_from_a_summarized_round_reads_the_originals(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host(12)
    run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    first = summaries(rt)[0]
    assert first.summary is not None and first.round >= 2
    answer = fork_job(rt, JOB, first.round, fork_id="fork-1")
    assert answer["accepted"]
    kept = rt.store.memory("fork-1").get_messages()
    assert not [m for m in kept if m.role == "summary"]  # the summary stood for rounds it lacks
    assert [m.round for m in kept if m.role == "actor"] == list(range(first.round))
    later = fork_job(rt, JOB, first.round + 1, fork_id="fork-2")
    assert later["accepted"]
    assert [m.round for m in rt.store.memory("fork-2").get_messages() if m.role == "summary"] == [first.round]
    before = len(host.summaries)
    run_job(
        monkeypatch, rt, {}, host, job_id="fork-2", first=("tandem.actor_turn", ["fork-2", first.round + 1])
    )
    result = rt.store.result("fork-2")
    assert result is not None and result.status == "completed", result
    read = [r for s in host.summaries[before:] for r in s]
    assert all(r > first.round + 1 for r in read)  # the fork's summaries read on after the one it kept


def test_compact_at_is_read_and_checked() -> None:
    assert Settings.from_env({}).compaction.compact_at == 0.8
    settings = Settings.from_env({"TANDEM_COMPACT_AT": "0.5", "TANDEM_ACTOR_SUMMARY_MODEL": "openai/small"})
    assert settings.compaction.compact_at == 0.5
    assert settings.compaction.summary_model("actor") == "openai/small"
    assert settings.compaction.summary_model("thinker") is None
    for bad in ("1.5", "-0.1", "most", "nan"):
        with pytest.raises(SettingsError, match=f"TANDEM_COMPACT_AT='{bad}' must be a share"):
            Settings.from_env({"TANDEM_COMPACT_AT": bad})


def test_summaries_off_send_no_compaction_step(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    rt.settings = Settings.from_env({"TANDEM_COMPACT_AT": "0"})
    host = Host(12)
    ran = run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, host)
    assert "tandem.compact_actor" not in ran and not host.summaries
    result = rt.store.result(JOB)
    assert result is not None and result.status == "completed", result


def test_a_summary_model_of_its_own_is_built_on_the_roles_host_settings() -> None:
    rt = Runtime(
        Settings.from_env(
            {
                "TANDEM_ACTOR_MODEL": "openai/big",
                "TANDEM_ACTOR_API_BASE": "http://127.0.0.1:9/v1",
                "TANDEM_ACTOR_SUMMARY_MODEL": "openai/small",
            }
        )
    )
    summarizer = rt.summarizer("actor")
    assert summarizer is not rt.model("actor") and summarizer is rt.summarizer("actor")
    assert "small" in summarizer.name
    assert rt.summarizer("thinker") is rt.model("thinker")


def test_the_compaction_step_is_a_span_of_the_jobs_trace_with_its_event(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tandem.reasoner import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        run_job(monkeypatch, rt, {"goal": "Read the book.", "reasoner": "mono", "max_rounds": 12}, Host(12))
    finally:
        tracing.uninstall()
    exported = exporter.get_finished_spans()
    compacting = [
        s
        for s in exported
        if s.name == "tandem.step" and (s.attributes or {}).get("tandem.step.kind") == "compact_actor"
    ]
    assert compacting and len({s.context.trace_id for s in exported}) == 1
    attrs = compacting[0].attributes or {}
    assert attrs["tandem.role"] == "actor" and attrs["tandem.claim"] == "claimed"
    (event,) = [e for e in compacting[0].events if e.name == "tandem.memory_compacted"]
    assert (event.attributes or {})["tandem.how"] == "summarized"
