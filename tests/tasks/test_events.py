"""``model_delta`` events: coalesced, ordered, split by the reasoning parser, and bounded."""

from __future__ import annotations

import math
from typing import Any

import fakeredis
import pytest

from tandem.reasoner import DualModelReasoner, Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.tasks.events import DeltaCoalescer, EventHooks
from tandem.tasks.job_events import (
    EventError,
    JobEvent,
    ModelDelta,
    ModelReply,
    RoundStarted,
    StreamSettings,
    ToolCall,
    decode_entry,
    encode_event,
    make_event,
)
from tandem.tasks.state.store import JobStore
from tests.tasks.round_trips import count_pipelines


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_coalescer_sends_on_time_or_size_and_keeps_everything() -> None:
    sent: list[tuple[str, str]] = []
    clock = Clock()
    coalescer = DeltaCoalescer(lambda r, c: sent.append((r, c)), interval=0.1, max_chars=10, clock=clock)
    coalescer("ab", "")
    coalescer("", "cd")
    assert sent == []  # neither 100 ms nor 10 characters yet
    clock.now = 0.15
    coalescer("", "e")
    assert sent == [("ab", "cde")]
    coalescer("", "0123456789")  # the size bound, at once
    assert sent[-1] == ("", "0123456789")
    coalescer("", "tail")
    coalescer("", "")
    coalescer.flush()
    coalescer.flush()  # nothing left: nothing sent
    assert sent == [("ab", "cde"), ("", "0123456789"), ("", "tail")]


def test_reasoning_after_content_is_never_merged_before_it() -> None:
    sent: list[tuple[str, str]] = []
    coalescer = DeltaCoalescer(lambda r, c: sent.append((r, c)), interval=60, max_chars=1000)
    coalescer("think ", "")
    coalescer("", "say ")
    coalescer("think again", "")
    coalescer.flush()
    assert sent == [("think ", "say "), ("think again", "")]


THINKER = "<think>The user wants words counted.</think><instruction>Count the words</instruction>"
ACTOR = "<think>Easy: two words.</think><action>counting</action><deliverable>2 words</deliverable>"


def run_job(store: JobStore, chunk: int | None = 3) -> list[JobEvent]:
    thinker = ScriptedModelService([THINKER], name="t", stream_chunk=chunk)
    actor = ScriptedModelService([ACTOR], name="a", stream_chunk=chunk)
    store.set_status("job", state="running")
    outcome = DualModelReasoner(thinker=thinker, actor=actor, hooks=EventHooks(store, "job")).run(
        Task(goal="count 'a b'", max_rounds=2)
    )
    assert outcome.deliverable == "2 words"
    return store.read_events("job", count=10_000)


@pytest.mark.parametrize("interval", [0.0, 60.0], ids=["every-delta", "size-bound-only"])
def test_deltas_come_before_their_reply_and_add_up_to_it(interval: float) -> None:
    store = JobStore(
        fakeredis.FakeRedis(), stream=StreamSettings(delta_interval=interval, delta_max_chars=16)
    )
    events = run_job(store)

    replies = [e for e in events if isinstance(e, ModelReply)]
    assert [(r.round, r.role) for r in replies] == [(0, "thinker"), (0, "actor")]
    for reply in replies:
        position = events.index(reply)
        deltas = [e for e in events if isinstance(e, ModelDelta) and e.role == reply.role]
        assert deltas and all(events.index(d) < position for d in deltas)
        assert len({d.attempt for d in deltas}) == 1
        assert [d.seq for d in deltas] == list(range(len(deltas)))
        assert "".join(d.content for d in deltas) == reply.content
        assert "".join(d.reasoning for d in deltas) == reply.reasoning
        assert "<think>" not in "".join(d.content for d in deltas)  # thinking never leaks
        if interval:
            assert all(len(d.reasoning) + len(d.content) >= 16 for d in deltas[:-1])
            text = len(reply.content) + len(reply.reasoning)
            assert len(deltas) <= math.ceil(text / 16) + 1


def test_deltas_can_be_turned_off() -> None:
    store = JobStore(fakeredis.FakeRedis(), stream=StreamSettings(deltas=False))
    kinds = [e.type for e in run_job(store)]
    assert "model_delta" not in kinds and kinds.count("model_reply") == 2


def test_a_failed_model_call_still_flushes_what_streamed() -> None:
    store = JobStore(fakeredis.FakeRedis(), stream=StreamSettings(delta_interval=60))
    hooks = EventHooks(store, "job")
    listener = hooks.model_streaming(0, "actor")
    assert listener is not None
    listener("", "partial")
    hooks.model_streamed(0, "actor")
    (delta,) = store.read_events("job")
    assert isinstance(delta, ModelDelta) and delta.content == "partial"


def test_events_survive_the_wire_unchanged() -> None:
    event = make_event(
        "model_delta", {"round": 2, "role": "thinker", "attempt": "z", "seq": 4, "content": "é"}
    )
    back = decode_entry(b"5-1", {k.encode(): v.encode() for k, v in encode_event(event).items()})
    assert back == event.model_copy(update={"id": "5-1", "at": back.at}) and back.at > 0
    with pytest.raises(EventError, match="'tool_call': field 'index'"):
        make_event("tool_call", {"round": 0})


def test_a_reply_not_streamed_publishes_its_reply_only() -> None:
    from tandem.reasoner.models.litellm_service import LiteLlmModelService
    from tandem.tasks.events import streams

    store = JobStore(fakeredis.FakeRedis(), stream=StreamSettings(delta_interval=60))
    hooks = EventHooks(store, "job", live=False)
    assert hooks.model_streaming(0, "actor") is None  # the whole reply comes in model_reply
    hooks.model_streamed(0, "actor")
    assert store.read_events("job") == []

    plain, streamed = LiteLlmModelService("openai/m"), LiteLlmModelService("openai/m", stream=True)

    class Wrapper:
        def __init__(self, inner: object) -> None:
            self.inner = inner

    assert not streams(plain) and not streams(Wrapper(plain))
    assert streams(streamed) and streams(Wrapper(streamed))
    assert streams(ScriptedModelService(["x"], stream_chunk=4))  # services with no ``stream`` flag


def test_held_events_go_out_together_in_order_after_the_commit() -> None:
    from tandem.reasoner.messages import ModelMessage
    from tandem.tasks.state.pending import DeferredHooks

    redis = fakeredis.FakeRedis()
    store = JobStore(redis)
    store.publish("job", RoundStarted(round=0, max_rounds=3))  # the intake's first event makes the stream
    redis.script_load(store._append_events.script)  # loaded: no NOSCRIPT round trip below
    sent = count_pipelines(redis)
    scripts: list[int] = []
    real_evalsha = redis.evalsha
    redis.evalsha = lambda sha, n, *args: scripts.append(len(args) - n) or real_evalsha(sha, n, *args)
    hooks = DeferredHooks(EventHooks(store, "job"))
    hooks.round_started(1, 3)
    hooks.model_replied(ModelMessage(role="thinker", content="plan", round=1))
    assert [e.type for e in store.read_events("job")] == ["round_started"]  # held until the flush
    hooks.flush()
    assert (sent, scripts) == ([], [3 + 2 * 3])  # both events in one script call, one round trip
    assert [e.type for e in store.read_events("job")] == ["round_started", "round_started", "model_reply"]


def test_batched_events_make_a_missing_stream() -> None:
    store = JobStore(fakeredis.FakeRedis())
    hooks = EventHooks(store, "job")
    with hooks.batched():
        hooks.round_started(0, 2)
        hooks.round_started(1, 2)
    assert [(e.type, e.data["round"]) for e in store.read_events("job")] == [
        ("round_started", 0),
        ("round_started", 1),
    ]
    assert store.redis.ttl(store.key("job", "events")) > 0


def test_a_batch_sent_again_after_a_lost_reply_is_written_once() -> None:
    """redis-py sends a command again when the connection drops before its reply (a Redis
    restart): the batch's write token makes the second delivery return the first one's ids."""
    redis = fakeredis.FakeRedis()
    store = JobStore(redis, ttl=600)
    store.publish("job", RoundStarted(round=0, max_rounds=3), ttl=900)
    redis.script_load(store._append_events.script)  # loaded: no NOSCRIPT round trip below
    calls: list[tuple[Any, ...]] = []
    real_evalsha = redis.evalsha

    def delivered_twice(sha: str, n: int, *args: Any) -> Any:
        calls.append(args)
        real_evalsha(sha, n, *args)  # applied, but its reply was lost
        return real_evalsha(sha, n, *args)  # the client's retry

    redis.evalsha = delivered_twice
    ids = store.append_all(
        "job", [ToolCall(round=0, index=1, name="add"), ToolCall(round=0, index=2, name="add")]
    )
    assert len(calls) == 1
    events = store.read_events("job")
    assert [(e.type, getattr(e, "index", None)) for e in events] == [
        ("round_started", None),
        ("tool_call", 1),
        ("tool_call", 2),
    ]
    assert ids == [e.id for e in events[1:]]  # the retry was answered with the first write's ids
    marks = store.key("job", "appended")
    assert redis.hlen(marks) == 1 and 0 < redis.ttl(marks) <= 900  # the stream's TTL, not forever
    assert store.append("job", ToolCall(round=0, index=3, name="add")) == store.read_events("job")[-1].id
