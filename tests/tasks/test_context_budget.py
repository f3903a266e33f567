"""Context budgets on the distributed side: ``TANDEM_<ROLE>_CONTEXT_TOKENS`` read and checked, a
goal and context over a role's budget refused at intake naming both numbers, a follow-up's thread
kept within half the smallest budget, and ``memory_compacted`` written, read back and shown."""

from __future__ import annotations

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.reasoner.context.compaction import Compaction
from tandem.reasoner.context.counting import conservative_estimate
from tandem.tasks.control.threads import ThreadJob, thread_text
from tandem.tasks.errors import JobSpecError
from tandem.tasks.events import EventHooks
from tandem.tasks.job_events import MemoryCompacted, make_event
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.state.store import JobStore
from tandem.workers.display import render_event


def runtime(**env: str) -> Runtime:
    return Runtime(Settings.from_env({f"TANDEM_{k.upper()}": v for k, v in env.items()}))


def test_the_setting_is_read_per_role_and_checked() -> None:
    settings = Settings.from_env({"TANDEM_ACTOR_CONTEXT_TOKENS": "4096"})
    assert settings.role("actor").context_tokens == 4096
    assert settings.role("thinker").context_tokens is None
    with pytest.raises(SettingsError, match="TANDEM_THINKER_CONTEXT_TOKENS='100' must be at least 256"):
        Settings.from_env({"TANDEM_THINKER_CONTEXT_TOKENS": "100"})


def test_a_role_gets_its_budget_and_the_reply_reserve_from_its_settings() -> None:
    rt = runtime(actor_context_tokens="4096", actor_max_tokens="512", thinker_context_tokens="8192")
    budgets = rt.context_budgets(JobSpec(goal="g"))
    assert (budgets["actor"].limit, budgets["actor"].reserve) == (3584, 512)
    assert budgets["thinker"].reserve == 2048  # unset MAX_TOKENS: a quarter of the window at most
    assert list(rt.context_budgets(JobSpec(goal="g", reasoner="react"))) == ["actor"]
    assert runtime().context_budgets(JobSpec(goal="g")) == {}


def test_a_goal_over_the_smallest_budget_is_refused_at_intake_naming_both_numbers() -> None:
    rt = runtime(actor_context_tokens="1024", thinker_context_tokens="65536")
    goal = "word " * 1500
    with pytest.raises(JobSpecError) as refused:
        rt.check_spec(JobSpec(goal=goal))
    tokens = conservative_estimate(f"<task>\n<goal>{goal}</goal>\n</task>") + 16
    assert f"take {tokens:,} tokens" in str(refused.value)
    assert "the actor's context budget of 768 tokens" in str(refused.value)
    assert "TANDEM_ACTOR_CONTEXT_TOKENS" in str(refused.value)
    rt.check_spec(JobSpec(goal="word " * 100))  # one that fits is accepted


def test_a_reply_reserve_that_fills_the_window_is_refused_at_intake() -> None:
    rt = runtime(actor_context_tokens="1024", actor_max_tokens="2048")
    with pytest.raises(JobSpecError, match="TANDEM_ACTOR_MAX_TOKENS=2048 leaves no room"):
        rt.check_spec(JobSpec(goal="g", reasoner="mono"))


def test_a_follow_ups_thread_keeps_within_half_the_smallest_budget() -> None:
    rt = runtime(actor_context_tokens="2048", thinker_context_tokens="65536")
    room = rt.thread_tokens(JobSpec(goal="first"), "next")
    assert room is not None
    tokens, count = room
    assert 0 < tokens < 1536 // 2
    store = JobStore(fakeredis.FakeRedis())
    jobs = [ThreadJob(job_id=f"j{n}", goal=f"goal {n}: " + "x" * 900, state="completed") for n in range(10)]
    text, dropped = thread_text(store, jobs, 100_000, max_tokens=tokens, count=count)
    assert count(text) <= tokens and dropped > 0
    assert "goal 9:" in text and "goal 0:" not in text  # the oldest go first
    whole, none = thread_text(store, jobs, 100_000)
    assert none == 0 and "goal 0:" in whole
    assert runtime().thread_tokens(JobSpec(goal="g"), "next") is None  # no budget: characters only


def test_memory_compacted_is_written_read_back_and_shown() -> None:
    store = JobStore(fakeredis.FakeRedis())
    hooks = EventHooks(store, "job")
    hooks.memory_compacted(Compaction(7, "thinker", 9000, 2500, (0, 4)))
    (event,) = store.read_events("job", count=10)
    assert isinstance(event, MemoryCompacted)
    assert (event.round, event.role, event.tokens_before, event.tokens_after) == (7, "thinker", 9000, 2500)
    assert (event.rounds_dropped, event.rounds_summarized, event.how) == ([0, 4], 0, "dropped")
    shown = render_event(event)
    assert (
        "memory compacted: rounds 1–5, 9,000 → 2,500 tokens" in shown and "left out for the thinker" in shown
    )
    assert event.summary_of_rounds == [0, 4]
    assert make_event("memory_compacted", event.data) == event.model_copy(update={"id": "", "at": 0.0})


def test_a_steps_compaction_is_held_until_its_commit() -> None:
    from tandem.tasks.state.pending import DeferredHooks

    store = JobStore(fakeredis.FakeRedis())
    held = DeferredHooks(EventHooks(store, "job"))
    held.memory_compacted(Compaction(3, "actor", 5000, 3000, (0, 1)))
    assert store.read_events("job", count=10) == []  # a step that fails before its commit reports nothing
    (event,) = held.drain() or []
    assert isinstance(event, MemoryCompacted) and event.rounds_dropped == [0, 1]
