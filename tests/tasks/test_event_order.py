"""The order of a job's events (docs/events.md, "The order of events"): a round's ``round_started``
comes before any of its ``model_delta`` events, once, on every path a step can take: streamed or
not, dual, mono and react, run again after its worker died, retried after its stream broke.

The jobs run in this thread on fakeredis through the real Celery tasks (every message applied in
the order it was sent), with the offline demo model, which streams its replies.
"""

from __future__ import annotations

import importlib
from collections import deque
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.reasoner.errors import TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.model_service import ModelService
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.events import EventHooks
from tandem.tasks.job_events import JobEvent, JobStarted, ModelDelta, ModelReply, RoundStarted
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.claims import Claim
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.pending import DeferredHooks
from tandem.tasks.state.store import JobStore
from tests.event_order import order_problems
from tests.tasks.round_trips import count_commands, count_pipelines

JOB = "job-order-1"
GOAL = "What is (17 * 23) + 4?"


class WorkerDied(BaseException):
    """What a step sees of its worker's death: nothing after this point runs (no commit, no
    failure handling), and its claim stays until its lease runs out."""


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    for module in app.conf.imports:  # the tasks, as a worker registers them
        importlib.import_module(module)
    runtime = Runtime(Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


def run_job(monkeypatch: pytest.MonkeyPatch, rt: Runtime, spec: dict[str, Any]) -> list[JobEvent]:
    """Run a job in this thread, every message applied in the order it was sent (a step whose
    worker "died" is taken over once its lease ran out); the job's events."""
    queue: deque[tuple[str, list[Any]]] = deque()
    monkeypatch.setattr(
        app, "send_task", lambda name, args=None, **kw: queue.append((name, list(args or [])))
    )
    app.tasks["tandem.infer"].apply(kwargs={"spec": spec}, task_id=JOB, ignore_result=True)
    while queue:
        name, args = queue.popleft()
        try:
            app.tasks[name].apply(args=args)
        except WorkerDied:
            rt.redis.hset(rt.store.key(JOB, "state"), "lease_until", "1.0")  # nobody renewed it
            queue.appendleft((name, args))  # the reconciler sends the step again
    assert rt.store.result(JOB) is not None, "the job did not end"
    return rt.store.read_events(JOB, count=100_000)


class BreaksOnce:
    """A model whose first call streams part of a reply and then fails with ``failure``; every
    other call is ``inner``'s."""

    def __init__(self, inner: ModelService, failure: BaseException) -> None:
        self.inner = inner
        self.failure = failure
        self.broke = False

    def generate(self, sys_prompt: str, messages: Any, tools: Any = None, **kw: Any) -> Any:
        listener = kw.get("on_delta")
        if not self.broke:
            self.broke = True
            if listener is not None:
                listener("", "the first tokens ")
                listener("", "of a reply cut off")
            raise self.failure
        return self.inner.generate(sys_prompt, messages, tools, **kw)


def breaking(monkeypatch: pytest.MonkeyPatch, rt: Runtime, role: str, failure: BaseException) -> BreaksOnce:
    real = rt.model
    broken = BreaksOnce(real(role, "dual"), failure)
    monkeypatch.setattr(rt, "model", lambda r, mode="dual": broken if r == role else real(r, mode))
    return broken


def opened_with_first_token(events: list[JobEvent]) -> None:
    """Each round's ``round_started`` is followed at once by its first ``model_delta``."""
    for i, event in enumerate(events):
        if isinstance(event, RoundStarted):
            following = events[i + 1]
            assert isinstance(following, ModelDelta) and following.round == event.round, events[i : i + 2]


@pytest.mark.parametrize("reasoner", ["dual", "mono", "react"])
def test_a_streamed_round_starts_before_its_tokens_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, reasoner: str
) -> None:
    events = run_job(monkeypatch, rt, {"goal": GOAL, "reasoner": reasoner, "max_rounds": 6})
    assert order_problems(events) == []
    replies = [e for e in events if isinstance(e, ModelReply)]
    assert replies and {(e.round, e.role) for e in events if isinstance(e, ModelDelta)} == {
        (e.round, e.role) for e in replies
    }
    opened_with_first_token(events)


@pytest.mark.parametrize("reasoner", ["dual", "mono"])
def test_a_round_not_streamed_starts_with_its_commit_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, reasoner: str
) -> None:
    monkeypatch.setattr("tandem.tasks.steps.model.streams", lambda model: False)
    events = run_job(monkeypatch, rt, {"goal": GOAL, "reasoner": reasoner, "max_rounds": 6})
    assert order_problems(events) == []
    assert not [e for e in events if isinstance(e, ModelDelta)]
    kinds = [e.type for e in events]
    for i, kind in enumerate(kinds):
        if kind == "round_started":
            assert kinds[i + 1] == "model_reply"  # written by the same commit


def test_a_step_retried_after_its_stream_broke_announces_its_round_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = breaking(monkeypatch, rt, "thinker", TransientModelError("the stream broke", model="m"))
    events = run_job(monkeypatch, rt, {"goal": GOAL, "max_rounds": 6})
    assert broken.broke
    assert order_problems(events, late_deltas=True) == []
    kinds = [e.type for e in events]
    assert kinds[:4] == ["job_started", "round_started", "model_delta", "waiting"]
    attempts = {
        e.attempt for e in events if isinstance(e, ModelDelta) and (e.round, e.role) == (0, "thinker")
    }
    assert len(attempts) == 2


def test_a_step_run_again_after_its_worker_died_announces_its_round_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = breaking(monkeypatch, rt, "thinker", WorkerDied())
    events = run_job(monkeypatch, rt, {"goal": GOAL, "max_rounds": 6})
    assert broken.broke
    assert order_problems(events, late_deltas=True) == []
    assert [e.type for e in events][:3] == ["job_started", "round_started", "model_delta"]
    cut_off = [e for e in events if isinstance(e, ModelDelta) and e.content.startswith("the first tokens")]
    assert cut_off and events.index(cut_off[0]) == 2


def test_a_step_not_streamed_after_a_streamed_attempt_does_not_announce_its_round_again(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt streamed (and wrote the round_started with its first token), the worker
    died; the step runs again where the role does not stream: its commit leaves the round_started
    out (the record says round 0 was announced)."""
    breaking(monkeypatch, rt, "thinker", WorkerDied())
    calls: list[int] = []

    def live_once(model: Any) -> bool:
        calls.append(1)
        return len(calls) == 1

    monkeypatch.setattr("tandem.tasks.steps.model.streams", live_once)
    events = run_job(monkeypatch, rt, {"goal": GOAL, "max_rounds": 6})
    assert order_problems(events, late_deltas=True) == []
    # the cut-off attempt's tokens (one coalesced delta), then the stored reply, unannounced again
    assert [e.type for e in events][:4] == ["job_started", "round_started", "model_delta", "model_reply"]


# -- the two writes that may announce a round: its first token, or its commit ---------------------


def _started(machine: JobMachine) -> Claim:
    store = machine.store
    started = store.entry(JobStarted(spec={"goal": "g"}))
    assert machine.create(
        JOB, '{"goal": "g"}', "dual", (0, "thinker"), [], timeout=3600, ttl_after=600, started=started
    )
    got = machine.claim(JOB, 0, "thinker", 30.0, 5)
    assert isinstance(got, Claim)
    return got


def _types(machine: JobMachine) -> list[tuple[str, int | None]]:
    events = machine.store.read_events(JOB, count=1000)
    return [(e.type, getattr(e, "round", None)) for e in events]


def test_the_first_token_announces_the_round_and_the_commit_does_not_again(machine: JobMachine) -> None:
    store = machine.store
    claim = _started(machine)
    hooks = DeferredHooks(EventHooks(store, JOB))
    hooks.round_started(0, 3)
    listener = hooks.model_streaming(0, "thinker")
    assert listener is not None
    listener("", "hello ")
    hooks.model_streamed(0, "thinker")
    hooks.model_replied(ModelMessage(role="thinker", content="hello ", round=0))
    entries = [store.entry(e) for e in hooks.drain() or []]
    assert [e["type"] for e in entries] == ["round_started", "model_reply"]  # held, as before
    assert machine.transition(claim, (0, "actor", 0, ""), [], [], tx="t1", events=entries)
    assert _types(machine) == [
        ("job_started", 0),
        ("round_started", 0),
        ("model_delta", 0),
        ("model_reply", 0),
    ]
    # The next round, not streamed: its commit announces it.
    claim = machine.claim(JOB, 0, "actor", 30.0, 5)
    assert isinstance(claim, Claim)
    assert machine.transition(claim, (1, "thinker", 0, ""), [], [], tx="t2")
    claim = machine.claim(JOB, 1, "thinker", 30.0, 5)
    assert isinstance(claim, Claim)
    opening = [store.entry(RoundStarted(round=1, max_rounds=3))]
    assert machine.transition(claim, (1, "actor", 0, ""), [], [], tx="t3", events=opening)
    assert _types(machine)[-1] == ("round_started", 1)
    assert machine.redis.hget(store.key(JOB, "state"), "opened") == b"1"


def test_a_round_is_announced_once_however_often_its_first_token_is_written(machine: JobMachine) -> None:
    store = machine.store
    _started(machine)
    opening = RoundStarted(round=0, max_rounds=3)
    for attempt in ("a", "b"):  # a step run again: its new call's first token
        store.append_delta(
            JOB, ModelDelta(round=0, role="thinker", attempt=attempt, content="x"), opening=opening
        )
    assert _types(machine) == [
        ("job_started", 0),
        ("round_started", 0),
        ("model_delta", 0),
        ("model_delta", 0),
    ]
    store.append_delta(JOB, ModelDelta(round=1, role="thinker"), opening=RoundStarted(round=1, max_rounds=3))
    assert _types(machine)[-2:] == [("round_started", 1), ("model_delta", 1)]


def test_an_ended_job_gets_no_round_started_after_its_final(machine: JobMachine) -> None:
    store = machine.store
    _started(machine)
    machine.redis.hset(store.key(JOB, "state"), "state", "cancelled")
    store.append_delta(JOB, ModelDelta(round=0, role="thinker"), opening=RoundStarted(round=0, max_rounds=3))
    assert _types(machine) == [("job_started", 0), ("model_delta", 0)]


def test_the_first_token_and_its_round_started_cost_one_round_trip() -> None:
    redis = fakeredis.FakeRedis()
    store = JobStore(redis, ttl=600)
    machine = store.machine
    assert machine.create(JOB, "{}", "dual", (0, "thinker"), [], timeout=60, ttl_after=60)
    store.publish(JOB, RoundStarted(round=0, max_rounds=1))  # the stream exists
    redis.script_load(store._append_delta.script)  # loaded: no NOSCRIPT round trip below
    commands = count_commands(redis)
    pipelines = count_pipelines(redis)
    hooks = EventHooks(store, JOB)
    hooks.open_with_first_delta(0, 3)
    listener = hooks.model_streaming(0, "thinker")
    assert listener is not None
    listener("", "a" * 600)  # over the size bound: written at once
    listener("", "b" * 600)
    assert (commands, pipelines) == (["EVALSHA", "XADD"], [])  # the opening's script, then a plain XADD


def _deltas(machine: JobMachine) -> list[tuple[str, int, str]]:
    events = machine.store.read_events(JOB, count=1000)
    return [(e.attempt, e.seq, e.content[:1]) for e in events if isinstance(e, ModelDelta)]


def test_a_workers_tokens_are_fenced_once_another_took_its_step_over(machine: JobMachine) -> None:
    """A worker paused past its lease (its claim's epoch now older than the record's) writes no
    token amid or after the takeover's, nor after the job's end (docs/events.md, point 4)."""
    store = machine.store
    first = _started(machine)
    paused = EventHooks(store, JOB, epoch=first.epoch)
    late = paused.model_streaming(0, "thinker")
    assert late is not None
    late("", "a" * 600)  # over the size bound: written at once
    machine.redis.hset(store.key(JOB, "state"), "lease_until", "1.0")  # nobody renewed it
    second = machine.claim(JOB, 0, "thinker", 30.0, 5)
    assert isinstance(second, Claim) and second.epoch > first.epoch
    takeover = EventHooks(store, JOB, epoch=second.epoch).model_streaming(0, "thinker")
    assert takeover is not None
    takeover("", "b" * 600)
    late("", "c" * 600)  # the paused worker goes on: fenced
    paused.model_streamed(0, "thinker")
    takeover("", "d" * 600)
    assert machine.finish(JOB, f'{{"job_id": "{JOB}", "status": "cancelled"}}', "cancelled", "", 60)
    takeover("", "e" * 600)  # after the end: fenced too
    attempts = [a for a, _, _ in _deltas(machine)]
    assert [(seq, text) for _, seq, text in _deltas(machine)] == [(0, "a"), (0, "b"), (1, "d")]
    assert attempts[1] == attempts[2] != attempts[0]


def test_a_token_fenced_by_its_claim_costs_one_round_trip() -> None:
    redis = fakeredis.FakeRedis()
    store = JobStore(redis, ttl=600)
    machine = store.machine
    assert machine.create(JOB, "{}", "dual", (0, "thinker"), [], timeout=60, ttl_after=60)
    claim = machine.claim(JOB, 0, "thinker", 30.0, 5)
    assert isinstance(claim, Claim)
    store.publish(JOB, JobStarted(spec={"goal": "g"}))  # the stream exists
    redis.script_load(store._append_delta.script)
    commands = count_commands(redis)
    pipelines = count_pipelines(redis)
    hooks = EventHooks(store, JOB, epoch=claim.epoch)
    hooks.open_with_first_delta(0, 3)
    listener = hooks.model_streaming(0, "thinker")
    assert listener is not None
    listener("", "a" * 600)
    listener("", "b" * 600)
    assert (commands, pipelines) == (["EVALSHA", "EVALSHA"], [])  # the script checks the epoch
    kinds = [e.type for e in store.read_events(JOB)]
    assert kinds == ["job_started", "round_started", "model_delta", "model_delta"]


def test_a_job_started_with_no_record_of_its_stream_is_still_announced() -> None:
    """No stream (it expired, or the intake never made it): the round and its token are published
    anyway, the stream made with a TTL."""
    store = JobStore(fakeredis.FakeRedis(), ttl=600)
    store.append_delta(JOB, ModelDelta(round=0, role="actor"), opening=RoundStarted(round=0, max_rounds=1))
    assert [e.type for e in store.read_events(JOB)] == ["round_started", "model_delta"]
    assert store.redis.ttl(store.key(JOB, "events")) > 0


def test_a_resumed_run_inside_a_started_round_does_not_announce_it_again(machine: JobMachine) -> None:
    from tandem.tasks.state.reopen import Placement, Reopener

    store = machine.store
    _started(machine)
    store.append_delta(JOB, ModelDelta(round=0, role="thinker"), opening=RoundStarted(round=0, max_rounds=3))
    assert machine.finish(JOB, f'{{"job_id": "{JOB}", "status": "failed"}}', "failed", "boom", 60)
    at = Placement(0, "thinker", [{"task": "tandem.thinker_turn", "args": [JOB, 0]}])
    updated = machine.record(JOB).get("updated_at", "")
    assert (
        Reopener(machine).reopen(JOB, updated, '{"goal": "g"}', "dual", at, timeout=60, ttl_after=60).outcome
        == "ok"
    )
    store.append_delta(JOB, ModelDelta(round=0, role="thinker"), opening=RoundStarted(round=0, max_rounds=3))
    assert [t for t in _types(machine) if t[0] == "round_started"] == [("round_started", 0)]
    assert _types(machine)[-1] == ("model_delta", 0)
