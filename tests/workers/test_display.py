"""``render_event``: one line or block per event of a job's stream."""

from __future__ import annotations

import io
import time
from typing import Any

import fakeredis
import pytest

from tandem.reasoner import MonoModelReasoner, Task
from tandem.reasoner.demo import DEMO_GOAL, demo_model, demo_tools
from tandem.tasks.events import EventHooks
from tandem.tasks.job_events import JobEvent, ModelDelta, ModelReply, Waiting
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.store import JobStore
from tandem.workers.display import LiveDisplay, render_event, show_events


def event(kind: str, **data: Any) -> dict[str, Any]:
    return {"id": "1-0", "type": kind, "data": data, "at": 0.0}


def test_job_started() -> None:
    text = render_event(event("job_started", spec={"reasoner": "mono", "max_rounds": 5}))
    assert text == "job started: mono reasoner, up to 5 rounds"
    assert render_event(event("job_started", spec={"max_rounds": 20})).startswith(
        "job started: dual reasoner"
    )


def test_a_resumed_or_forked_run_says_where_it_goes_on() -> None:
    spec = {"reasoner": "dual", "max_rounds": 30}
    resumed = render_event(event("job_started", spec=spec, resumed=True, round=2, step="actor"))
    assert resumed == "\njob resumed at the actor step of round 3: dual reasoner, up to 30 rounds"
    forked = render_event(
        event("job_started", spec=spec, forked_from="job-1", forked_round=2, round=2, step="thinker")
    )
    assert forked.startswith("job forked from job-1 (its first 2 rounds), going on at the thinker step")


def test_round_started_counts_from_one() -> None:
    text = render_event(event("round_started", round=0, max_rounds=5))
    assert text.startswith("\n── round 1 of 5 ")


def test_a_thinker_reply_shows_reasoning_instruction_and_input() -> None:
    text = render_event(
        event(
            "model_reply",
            round=0,
            role="thinker",
            model="big-host",
            reasoning="the user wants a count",
            content="<deep_thinking>plan</deep_thinking><instruction>Count the words</instruction>"
            "<input>the text</input>",
        )
    )
    assert text.splitlines() == [
        "Thinker (big-host):",
        "    reasoning: the user wants a count",
        "    instruction: Count the words",
        "    input: the text",
    ]


def test_a_thinker_reply_without_tags_shows_its_visible_text() -> None:
    text = render_event(
        event("model_reply", round=0, role="thinker", model=None, content="<think>x</think>Just count.")
    )
    assert text.splitlines() == ["Thinker (model):", "    instruction: Just count."]


def test_an_actor_reply_shows_its_action_with_calls_folded() -> None:
    content = (
        "<shallow_thinking>quick</shallow_thinking><action>Counting now.\n"
        '<function_call>{"name": "word_count", "args": {"text": "a b"}}</function_call></action>'
    )
    text = render_event(event("model_reply", round=0, role="actor", model="small-host", content=content))
    assert text.splitlines() == ["Actor (small-host):", "    action: Counting now.", "    [tool call]"]
    assert "quick" not in text and "word_count" not in text


def test_an_actor_deliverable_is_announced_not_printed() -> None:
    text = render_event(
        event("model_reply", round=0, role="actor", model="a", content="<deliverable>84</deliverable>")
    )
    assert text.splitlines() == ["Actor (a):", "    (deliverable written)"]


def test_an_actor_reply_without_tags_shows_its_visible_text() -> None:
    text = render_event(
        event("model_reply", round=0, role="actor", model="a", content="<think>hidden</think>plain words")
    )
    assert text.splitlines() == ["Actor (a):", "    plain words"]


def test_long_text_is_shortened_with_a_count() -> None:
    text = render_event(event("model_reply", round=0, role="actor", model="a", content="w" * 1000))
    assert "…[600 more characters]" in text and "w" * 401 not in text


def test_tool_call_and_result() -> None:
    call = render_event(event("tool_call", round=0, index=2, name="add", args={"a": 1, "b": "x"}, error=None))
    assert call == "  → tool call 2: add(a=1, b='x')"
    again = render_event(event("tool_call", round=0, index=2, name="add", args={"a": 1}, attempt=2))
    assert again == "  → tool call 2: add(a=1) (run again: attempt 2)"
    result = render_event(event("tool_result", round=0, index=2, name="add", status="failed", output="boom"))
    assert result == "  ← result 2 [failed]: boom"


def test_approval_requested_and_decided() -> None:
    pending = [{"index": 2, "tool": "send_email", "args": {"to": "ann@example.com"}, "objective": "tell"}]
    asked = render_event(event("approval_requested", round=0, pending=pending, timeout_s=600))
    assert asked == (
        "  ⏸ waiting for approval: 2. send_email({'to': 'ann@example.com'})"
        "  (decide with `tandem approve JOB`)"
    )
    decisions = [{"index": 2, "approve": False, "reason": "external"}, {"index": 3, "approve": True}]
    decided = render_event(
        event("approval_decided", round=0, by="person", decisions=decisions, complete=True)
    )
    assert decided == "  ✓ decided (person): 2 rejected: external; 3 approved"


def test_final_with_a_deliverable() -> None:
    text = render_event(
        event(
            "final",
            status="completed",
            rounds=3,
            usage={"calls": 6, "total_tokens": 1234},
            deliverable="  line one\nline two\n",
            error=None,
        )
    )
    assert text.splitlines() == [
        "",
        "══ COMPLETED after 3 round(s); 6 model calls, 1234 tokens",
        "deliverable:",
        "  line one",
        "  line two",
    ]


def test_final_with_an_error() -> None:
    text = render_event(event("final", status="failed", rounds=1, deliverable="", error="ModelCallError: x"))
    assert text.splitlines() == [
        "",
        "══ FAILED after 1 round(s); 0 model calls, 0 tokens",
        "error: ModelCallError: x",
    ]


def test_an_unknown_event_shows_nothing() -> None:
    assert render_event(event("heartbeat")) == ""


@pytest.fixture
def published_run() -> list[JobEvent]:
    """The events of a real (in-process) demo run, published and read back through Redis."""
    store = JobStore(fakeredis.FakeRedis())
    spec = JobSpec(goal=DEMO_GOAL, reasoner="mono", max_rounds=5)
    store.create("job", spec)
    store.publish("job", "job_started", {"spec": spec.model_dump(mode="json")})
    outcome = MonoModelReasoner(demo_model("mono"), hooks=EventHooks(store, "job")).run(
        Task(goal=DEMO_GOAL, tools=demo_tools(), max_rounds=5)
    )
    store.finish(
        JobResult(
            job_id="job",
            status=outcome.status,
            deliverable=outcome.deliverable,
            rounds=outcome.rounds,
            usage=outcome.usage,
        ),
        ttl=60,
    )
    return list(store.events("job", timeout=30))


def test_every_event_of_a_real_run_renders(published_run: list[JobEvent]) -> None:
    kinds = {e.type for e in published_run}
    assert kinds == {
        "job_started",
        "round_started",
        "model_delta",
        "model_reply",
        "tool_call",
        "tool_result",
        "final",
    }
    for e in published_run:
        assert render_event(e).strip() or e.type == "model_delta", e.type


def test_show_events_prints_them_and_returns_the_final_event(published_run: list[JobEvent]) -> None:
    out = io.StringIO()
    final = show_events(iter(published_run), out=out, tokens=False)

    assert final is not None and final.status == "completed"
    printed = out.getvalue()
    assert printed.startswith("job started: mono reasoner, up to 5 rounds\n")
    assert "  → tool call 1: word_count(text='tandem runs reasoning jobs on celery workers')" in printed
    assert "  ← result 1 [succeeded]: 84" in printed
    assert "══ COMPLETED after 3 round(s)" in printed and "7 * 12 = 84" in printed
    assert "(streaming)" not in printed


def test_show_events_prints_tokens_as_they_stream(published_run: list[JobEvent]) -> None:
    """Each reply's text appears from its deltas, and the stored reply adds only a summary."""
    out = io.StringIO()
    show_events(iter(published_run), out=out)
    printed = out.getvalue()

    assert printed.count("Actor (streaming):") == 3
    replies = [e for e in published_run if isinstance(e, ModelReply)]
    for reply in replies:  # the whole content reached the screen (indented by the display)
        assert reply.content.strip().replace("\n", "\n    ") in printed
    assert "(1 tool call(s))" in printed and "(deliverable written)" in printed
    assert "Actor (tandem-demo (offline)):" not in printed  # no second copy of the text
    assert "\x1b[" not in printed  # no colour codes when the output is not a terminal


def test_reasoning_and_content_deltas_are_shown_apart() -> None:
    out = io.StringIO()
    display = LiveDisplay(out, color=True)
    for reasoning, content in [("let me ", ""), ("think", ""), ("", "The answer"), ("", " is 4.")]:
        display.show(ModelDelta(round=0, role="thinker", attempt="a", reasoning=reasoning, content=content))
    display.show(ModelReply(round=0, role="thinker", content="The answer is 4."))
    display.show(ModelDelta(round=0, role="actor", attempt="b", content="ok"))
    display.show(ModelDelta(round=0, role="actor", attempt="c", content="ok again"))
    assert out.getvalue() == (
        "Thinker (streaming):\n"
        "    thinking: \x1b[2mlet me \x1b[0m\x1b[2mthink\x1b[0m\n"
        "    The answer is 4.\n"
        "Actor (streaming):\n"
        "    ok\n"
        "Actor (streaming) (the model call started over):\n"
        "    ok again"
    )


def test_show_events_without_a_final_returns_none() -> None:
    out = io.StringIO()
    assert show_events([event("round_started", round=0, max_rounds=1), event("unknown")], out=out) is None
    assert out.getvalue() == "\n── round 1 of 1 " + "─" * 40 + "\n"


def test_a_waiting_step_says_what_for_and_when_it_runs_again() -> None:
    # As a worker writes it (``reschedule``): through the store, then read back as a client does.
    store = JobStore(fakeredis.FakeRedis())
    store.publish(
        "job-w", Waiting(round=1, step="actor", reason="rpm", until=time.time() + 12, detail="budget")
    )
    (written,) = store.read_events("job-w")
    text = render_event(written)
    assert text.startswith("  … waiting: rpm, retrying in 1") and text.endswith(" s budget")
    assert (
        render_event(event("waiting", reason="in_flight", host="gpu-1")) == "  … waiting: in_flight on gpu-1"
    )


def test_questions_are_shown_with_their_pause_and_answer() -> None:
    from tandem.tasks.job_events import QuestionAnswered, QuestionAsked

    asked = QuestionAsked(
        round=0, pause_id="J:0:tools:1", question="Which city?", answer_schema={"type": "string"}
    )
    assert render_event(asked) == (
        '  ? waiting for an answer (pause J:0:tools:1): Which city? (answer fits {"type": "string"})'
        "  (answer with `tandem answer JOB ANSWER`)"
    )
    assert render_event(QuestionAnswered(round=0, answer="Oslo")) == '  ✓ answered (person): "Oslo"'
    assert (
        render_event(QuestionAnswered(round=0, by="timeout")) == "  ✓ answered (timeout): no answer in time"
    )
